// Calibration capture (src/runtime/calibration.h, hessian_capture.h): the SYRK kernel against a
// naive sum at awkward sizes; on fixture models, H of the first layer's attention input against
// Σ x·xᵀ computed here from the embeddings and the norm; every linear module named, shared
// inputs sharing one H, the Qwen3.5 q_proj (copied at load) traced back; MoE experts; spilling;
// and the calibration text's errors.
#include "runtime/calibration.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "loader/weight_store.h"

namespace hearth {
namespace {

std::string fixture(const std::string& name) {
  return std::string(HEARTH_TEST_DATA) + "/models/" + name;
}

std::vector<float> to_f32(const TensorInfo& t) {
  const size_t n = t.nbytes / dtype_size(t.dtype);
  std::vector<float> out(n);
  const auto* p = static_cast<const uint16_t*>(t.data);
  for (size_t i = 0; i < n; ++i)
    out[i] = t.dtype == DType::BF16  ? bf16_to_f32(p[i])
             : t.dtype == DType::F16 ? f16_to_f32(p[i])
                                     : static_cast<const float*>(t.data)[i];
  return out;
}

TEST(HessianAccumulate, MatchesNaiveSumAtAwkwardSizes) {
  ThreadPool pool(2);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (auto [n, m] : {std::pair<int64_t, int64_t>{1, 1}, {7, 13}, {33, 9}, {130, 17}, {261, 40}}) {
    std::vector<float> x(static_cast<size_t>(n * m));
    for (auto& v : x) v = dist(rng);
    std::vector<float> h(static_cast<size_t>(n * n), 0.5f);  // accumulates onto what is there
    hessian_accumulate(h.data(), n, x.data(), m, pool);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i; j < n; ++j) {
        double want = 0.5;
        for (int64_t t = 0; t < m; ++t) want += double(x[size_t(t * n + i)]) * x[size_t(t * n + j)];
        ASSERT_NEAR(h[size_t(i * n + j)], want, 1e-4 * (1 + std::abs(want)))
            << "n " << n << " m " << m << " at " << i << "," << j;
      }
  }
}

std::vector<int32_t> random_tokens(int64_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = int32_t(rng() % uint32_t(vocab));
  return t;
}

// Layer 0's attention input is rms_norm(embedding) · gain, which this test computes itself.
TEST(Calibration, FirstLayerHessianEqualsDirectSum) {
  const std::string dir = fixture("llama");
  const std::vector<int32_t> tokens = random_tokens(40, 256, 1);
  CalibrationOptions options;
  options.seq_len = 16;  // 16 + 16 + 8: a shorter last sequence too
  const CalibrationHessians hs = capture_hessians(dir, tokens, options);
  EXPECT_EQ(hs.tokens, 40);

  const WeightStore store = WeightStore::open(dir);
  const std::vector<float> embed = to_f32(*store.find("model.embed_tokens.weight"));
  const std::vector<float> gain = to_f32(*store.find("model.layers.0.input_layernorm.weight"));
  const int64_t H = 64;
  std::vector<double> want(static_cast<size_t>(H * H), 0.0);
  std::vector<double> x(static_cast<size_t>(H));
  for (int32_t t : tokens) {
    double ss = 0;
    for (int64_t i = 0; i < H; ++i)
      ss += double(embed[size_t(t * H + i)]) * embed[size_t(t * H + i)];
    const double inv = 1.0 / std::sqrt(ss / double(H) + 1e-6);
    for (int64_t i = 0; i < H; ++i) x[size_t(i)] = embed[size_t(t * H + i)] * inv * gain[size_t(i)];
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < H; ++j) want[size_t(i * H + j)] += x[size_t(i)] * x[size_t(j)];
  }
  const float* got = hs.find("model.layers.0.self_attn.q_proj", H);
  ASSERT_NE(got, nullptr);
  double scale = 0;
  for (int64_t i = 0; i < H; ++i) scale = std::max(scale, want[size_t(i * H + i)]);
  for (int64_t i = 0; i < H * H; ++i)
    ASSERT_NEAR(got[i], want[size_t(i)], 1e-4 * scale) << "entry " << i / H << "," << i % H;
  // q, k and v read one input: one H. gate and up likewise.
  EXPECT_EQ(hs.find("model.layers.0.self_attn.k_proj", H), got);
  EXPECT_EQ(hs.find("model.layers.0.self_attn.v_proj", H), got);
  EXPECT_EQ(hs.find("model.layers.1.mlp.up_proj", H), hs.find("model.layers.1.mlp.gate_proj", H));
  EXPECT_NE(hs.find("model.layers.1.mlp.gate_proj", H), got);
  EXPECT_EQ(hs.find("model.layers.0.self_attn.q_proj", H + 1), nullptr);  // wrong width
  EXPECT_EQ(hs.find("model.embed_tokens", H), nullptr);                   // a lookup, no product
}

// Every linear module of the checkpoint gets an H, under its checkpoint name.
void expect_every_linear_named(const std::string& name, int64_t n_tokens) {
  const std::string dir = fixture(name);
  const CalibrationHessians hs =
      capture_hessians(dir, random_tokens(n_tokens, 200, 2), CalibrationOptions{});
  const WeightStore store = WeightStore::open(dir);
  int found = 0;
  for (const auto& t : store.names()) {
    const TensorInfo* info = store.find(t);
    // Routed experts are left out: a random text need not reach every one.
    if (info->shape.size() != 2 || t.find("proj") == std::string::npos ||
        t.find(".experts.") != std::string::npos || t.starts_with("mtp."))
      continue;
    const std::string module = t.substr(0, t.size() - 7);
    EXPECT_NE(hs.find(module, info->shape[1]), nullptr) << name << ": " << module;
    ++found;
  }
  EXPECT_GT(found, 4) << name;
  EXPECT_GT(hs.size(), size_t(found) / 2);
}

TEST(Calibration, EveryLinearModuleHasAHessian) {
  expect_every_linear_named("qwen3", 24);
  expect_every_linear_named("qwen3_5_text", 24);  // q_proj is split into copies at load
  expect_every_linear_named("qwen3_next", 24);    // in_proj_qkvz and in_proj_ba re-laid at load
}

TEST(Calibration, MoeExpertsSeeOnlyTheirRoutedRows) {
  const std::string dir = fixture("qwen3_moe");
  const WeightStore store = WeightStore::open(dir);
  const CalibrationHessians hs = capture_hessians(dir, random_tokens(48, 200, 4), {});
  int with_h = 0, experts = 0;
  for (const auto& t : store.names()) {
    if (t.find(".experts.") == std::string::npos || !t.ends_with("gate_proj.weight")) continue;
    ++experts;
    const TensorInfo* info = store.find(t);
    const float* h = hs.find(t.substr(0, t.size() - 7), info->shape[1]);
    if (!h) continue;
    ++with_h;
    // gate and up of one expert read the same gathered rows: one H.
    const std::string up = t.substr(0, t.size() - 16) + "up_proj";
    EXPECT_EQ(hs.find(up, info->shape[1]), h) << t;
  }
  ASSERT_GT(experts, 0);
  EXPECT_GT(with_h, 0);
  const TensorInfo* router = store.find("model.layers.0.mlp.gate.weight");
  ASSERT_NE(router, nullptr);
  EXPECT_NE(hs.find("model.layers.0.mlp.gate", router->shape[1]), nullptr);
}

TEST(Calibration, SpilledHessiansEqualThoseInMemory) {
  const std::string dir = fixture("llama");
  const std::vector<int32_t> tokens = random_tokens(20, 256, 5);
  CalibrationOptions in_ram, spilled;
  spilled.memory_budget = 0;
  spilled.spill_dir = testing::TempDir();
  const CalibrationHessians a = capture_hessians(dir, tokens, in_ram);
  const CalibrationHessians b = capture_hessians(dir, tokens, spilled);
  EXPECT_EQ(a.spilled_bytes, 0u);
  EXPECT_EQ(b.spilled_bytes, b.bytes);
  const float* ha = a.find("model.layers.1.mlp.down_proj", 96);
  const float* hb = b.find("model.layers.1.mlp.down_proj", 96);
  ASSERT_TRUE(ha && hb);
  for (int64_t i = 0; i < 96 * 96; ++i) ASSERT_EQ(ha[i], hb[i]) << i;
}

TEST(Calibration, TextThatIsEmptyOrTooShortIsRefused) {
  const std::string model = std::string(HEARTH_SOURCE_DIR) + "/models/default";
  if (!std::filesystem::exists(model + "/tokenizer.json")) GTEST_SKIP() << "no default model";
  const std::string dir = testing::TempDir();
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  CalibrationOptions options;
  options.n_tokens = 64;
  auto message = [&](const std::string& file) {
    try {
      capture_hessians(model, std::filesystem::path(file), options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(write("empty.txt", "")).find("is empty"), std::string::npos);
  EXPECT_NE(message(write("blank.txt", " \n\n")).find("is empty"), std::string::npos);
  EXPECT_NE(message(write("short.txt", "Once upon a time.")).find("fewer than the 64"),
            std::string::npos);
  EXPECT_NE(message(dir + "/missing.txt").find("cannot read"), std::string::npos);
  options.n_tokens = 0;
  EXPECT_NE(message(write("ok.txt", "text")).find("--calib-tokens"), std::string::npos);
}

}  // namespace
}  // namespace hearth
