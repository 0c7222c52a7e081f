// capture_hessians (calibration.h): tokenize, run the model on a HessianCaptureBackend, then name
// each captured H by the checkpoint tensor its weight views point into (WeightStore provenance).
#include "runtime/calibration.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "loader/weight_store.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

namespace {

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail("cannot read calibration file '{}'", file.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

CalibrationHessians::CalibrationHessians(std::vector<HessianCaptureBackend::Accumulator> acc,
                                         std::map<std::string, size_t> by_module)
    : acc_(std::move(acc)), by_module_(std::move(by_module)) {
  for (const auto& a : acc_) (a.h.spilled() ? spilled_bytes : bytes) += a.h.bytes();
  bytes += spilled_bytes;
}

const float* CalibrationHessians::find(const std::string& module, int64_t n) const {
  auto it = by_module_.find(module);
  if (it == by_module_.end()) return nullptr;
  const auto& a = acc_[it->second];
  return a.n == n && a.rows > 0 ? a.h.data() : nullptr;
}

namespace {

CalibrationHessians run_calibration(const std::filesystem::path& model_dir,
                                    std::span<const int32_t> tokens, std::optional<int32_t> bos,
                                    const CalibrationOptions& options) {
  if (options.seq_len <= 0) fail("calibration sequence length must be positive");
  const int64_t n_tokens = int64_t(tokens.size());
  auto owned = std::make_unique<HessianCaptureBackend>(
      make_cpu_backend(/*keep_weights_mapped=*/true),
      HessianCaptureBackend::Options{options.memory_budget, options.spill_dir});
  HessianCaptureBackend* capture = owned.get();
  auto model = load_model(model_dir, std::move(owned), LoadOptions{});
  const int64_t n_ctx = model->info().n_ctx_train;
  const int64_t seq_len = n_ctx > 0 ? std::min(options.seq_len, n_ctx) : options.seq_len;
  const int64_t n_vocab = model->info().n_vocab;
  std::vector<float> logits(static_cast<size_t>(seq_len * n_vocab));
  for (int64_t begin = 0; begin < n_tokens; begin += seq_len) {
    if (options.cancel && options.cancel->load()) fail("interrupted");
    const int64_t end = std::min(n_tokens, begin + seq_len);
    std::vector<int32_t> seq(tokens.begin() + begin, tokens.begin() + end);
    if (bos) seq[0] = *bos;
    auto state = model->new_sequence();
    model->forward(*state, seq, LogitsRows::All, logits.data());
    if (options.on_progress) options.on_progress(end, n_tokens);
  }
  capture->finish();

  std::map<std::string, size_t> by_module;
  std::set<std::string> ambiguous;  // one tensor, several H (slices of a stacked expert tensor)
  const WeightStore* store = model->weight_store();
  if (!store)
    fail("{}: this model does not expose its checkpoint to calibration", model_dir.string());
  for (const auto& [weight, a] : capture->weight_accumulators()) {
    std::string name = store->checkpoint_name_of(weight);
    if (name.empty() || capture->is_lookup_table(weight)) continue;
    if (name.ends_with(".weight")) name.resize(name.size() - 7);
    auto [it, inserted] = by_module.emplace(name, a);
    if (!inserted && it->second != a) ambiguous.insert(name);
  }
  for (const auto& name : ambiguous) by_module.erase(name);
  CalibrationHessians out(capture->take_accumulators(), std::move(by_module));
  out.tokens = n_tokens;
  return out;
}

}  // namespace

CalibrationHessians capture_hessians(const std::filesystem::path& model_dir,
                                     const std::filesystem::path& calib_file,
                                     const CalibrationOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.n_tokens <= 0) fail("--calib-tokens must be positive, got {}", options.n_tokens);
  const std::string text = read_text(calib_file);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("calibration file '{}' is empty", calib_file.string());
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  std::vector<int32_t> tokens = tokenizer.encode(text, true);
  if (int64_t(tokens.size()) < options.n_tokens)
    fail(
        "calibration file '{}' gives {} tokens, fewer than the {} asked for (--calib-tokens): "
        "give a longer text or fewer tokens",
        calib_file.string(), tokens.size(), options.n_tokens);
  tokens.resize(size_t(options.n_tokens));
  const std::optional<int32_t> bos = tokenizer.adds_bos() ? tokenizer.bos_id() : std::nullopt;
  CalibrationHessians out = run_calibration(model_dir, tokens, bos, options);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

CalibrationHessians capture_hessians(const std::filesystem::path& model_dir,
                                     std::span<const int32_t> tokens,
                                     const CalibrationOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (tokens.empty()) fail("calibration: no tokens to run");
  CalibrationHessians out = run_calibration(model_dir, tokens, std::nullopt, options);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace hearth
