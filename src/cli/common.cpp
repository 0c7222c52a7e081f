#include "cli/common.h"

#include <filesystem>
#include <optional>
#include <vector>

#include "cli/progress.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "hub/hf_cache.h"

namespace hearth::cli {

void add_model_options(CLI::App& app, ModelOptions& o, std::vector<std::string>* models) {
  const char* what =
      "model directory (Hugging Face checkpoint), or ORG/NAME[:REVISION] from the Hugging Face "
      "cache (`hearth pull`)";
  if (models)
    app.add_option("-m,--model", *models, std::string(what) + "; repeat it to serve several");
  else
    app.add_option("-m,--model", o.dir, what);
  app.add_option("--device", o.device, "cpu, cuda, cuda:N or auto")->capture_default_str();
  app.add_option("-t,--threads", o.threads,
                 "CPU threads (default: the CPUs this process may use, from its affinity and "
                 "cgroup CPU quota)");
  app.add_flag("--no-mmap", o.no_mmap,
               "CPU: copy weights into huge-page memory (slower load, faster decode) instead of "
               "reading the mapped file");
  app.add_flag("--deterministic", o.deterministic,
               "batch-invariant kernels: a request's results are bit-identical whatever else "
               "runs with it (slower; on CUDA every product through one fixed-order kernel)");
  app.add_option("--tensor-parallel", o.tensor_parallel,
                 "-tp N: split the model over N ranks, one thread each with a share of the "
                 "threads (Megatron-style tensor parallelism; CPU and the llama and Qwen3.5 "
                 "families only for now)")
      ->capture_default_str();
}

std::vector<std::string> expand_short_aliases(int argc, char** argv) {
  std::vector<std::string> args;
  bool options_ended = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (i > 0 && !options_ended) {
      if (a == "--")
        options_ended = true;
      else if (a == "-tp")
        a = "--tensor-parallel";
      else if (a.rfind("-tp=", 0) == 0)
        a = "--tensor-parallel=" + a.substr(4);
    }
    args.push_back(std::move(a));
  }
  return args;
}

namespace {

// The bundled default model: installed beside the binary (PREFIX/bin/hearth →
// PREFIX/share/hearth/models/default, also in a release tarball), else the source tree's, for
// a binary run from its build folder.
std::optional<std::filesystem::path> bundled_model_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::vector<std::filesystem::path> candidates;
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "share/hearth/models/default");
  candidates.push_back(std::filesystem::path(HEARTH_SOURCE_ROOT) / "models/default");
  for (const auto& dir : candidates)
    if (std::filesystem::exists(dir / "config.json", ec)) return dir;
  return std::nullopt;
}

}  // namespace

std::string resolve_model_dir(const std::string& dir) {
  std::string given = dir;
  if (given.empty())
    if (const char* env = std::getenv("HEARTH_MODEL")) given = env;
  if (!given.empty()) {
    // A path that exists wins; else ORG/NAME[:REVISION] names a snapshot of the Hugging Face
    // cache (offline). Anything else goes to the loader, which says what is missing.
    std::error_code ec;
    if (std::filesystem::exists(given, ec)) return given;
    if (auto ref = hub::parse_repo_ref(given)) {
      try {
        return hub::resolve_cached_snapshot(hub::hub_cache_dir(), *ref).string();
      } catch (const Error& e) {
        fail("'{}' is not a directory, and as a Hugging Face model id: {}", given, e.what());
      }
    }
    return given;
  }
  if (auto bundled = bundled_model_dir()) return bundled->string();
  fail(
      "no model given: pass -m DIR (a Hugging Face checkpoint directory) or -m ORG/NAME (a "
      "model pulled with `hearth pull`), or set HEARTH_MODEL");
}

EngineOptions engine_options_from(ModelOptions& o) {
  if (o.threads < 0) fail("--threads must be >= 1, got {}", o.threads);
  ThreadPool::set_global_threads(o.threads);
  EngineOptions eo;
  eo.model_dir = resolve_model_dir(o.dir);
  eo.device = o.device;
  eo.mmap = !o.no_mmap;
  eo.deterministic = o.deterministic;
  eo.tensor_parallel = o.tensor_parallel;
  return eo;
}

std::unique_ptr<Model> load_model_from(ModelOptions& o) {
  if (o.threads < 0) fail("--threads must be >= 1, got {}", o.threads);
  ThreadPool::set_global_threads(o.threads);
  o.dir = resolve_model_dir(o.dir);
  LoadOptions load;
  load.device = o.device;
  load.mmap = !o.no_mmap;
  load.gdn_recurrent_prefill = o.gdn_recurrent_prefill;
  load.deterministic = o.deterministic;
  load.tensor_parallel = o.tensor_parallel;
  ProgressLine line("loading weights", "GB", 1e9);
  load.progress = [&line](size_t done, size_t total) {
    line.update(int64_t(done), int64_t(total));
  };
  auto model = load_model(o.dir, load);
  line.erase(true);
  return model;
}

std::vector<int32_t> parse_token_list(const std::string& text, const char* option) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) {
      if (comma == text.size() && !ids.empty() && pos == comma) break;
      fail("{}: empty token id in '{}'", option, text);
    }
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value > INT32_MAX)
      fail("{}: '{}' is not a valid token id", option, item);
    ids.push_back(int32_t(value));
    pos = comma + 1;
  }
  return ids;
}

void add_sampling_options(CLI::App& app, SamplingOptions& o) {
  SamplingOverrides& f = o.fields;
  app.add_option("--temperature,--temp", f.temperature, "sampling temperature (0 = greedy)");
  app.add_option("--top-k", f.top_k, "keep the k most likely tokens (0 = off)");
  app.add_option("--top-p", f.top_p, "nucleus sampling threshold (1 = off)");
  app.add_option("--min-p", f.min_p, "drop tokens below min_p × the top probability");
  app.add_option("--repeat-penalty", f.repetition_penalty, "repetition penalty (1 = off)");
  app.add_option("--presence-penalty", f.presence_penalty, "presence penalty");
  app.add_option("--frequency-penalty", f.frequency_penalty, "frequency penalty");
  app.add_option("--repeat-last-n", f.penalty_last_n,
                 "tokens the penalties look back over (0 = all)");
  app.add_option("--logit-bias", o.logit_bias, "ID:BIAS, repeatable");
  app.add_option("-s,--seed", f.seed, "random seed (same seed, same output)");
}

SamplingParams make_sampling_params(const SamplingOptions& o, SamplingParams defaults) {
  SamplingOverrides f = o.fields;
  for (const auto& item : o.logit_bias) {
    size_t sep = item.find_first_of(":=");
    if (sep == std::string::npos) fail("--logit-bias: expected ID:BIAS, got '{}'", item);
    auto ids = parse_token_list(item.substr(0, sep), "--logit-bias");
    if (ids.size() != 1) fail("--logit-bias: expected one token id in '{}'", item);
    float bias = 0;
    try {
      size_t used = 0;
      bias = std::stof(item.substr(sep + 1), &used);
      if (used != item.size() - sep - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      fail("--logit-bias: '{}' is not a number in '{}'", item.substr(sep + 1), item);
    }
    f.logit_bias[ids[0]] = bias;
  }
  return f.apply(defaults);
}

}  // namespace hearth::cli
