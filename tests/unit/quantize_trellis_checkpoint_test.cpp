// `hearth quantize --format trellis` (with and without --rotate): the plan (axis policy, config
// entries, the affine embedding and head, notices for shapes the block does not divide, refused
// options), and a small llama model quantized end to end: every module loads, its rows decode to
// the reference decoder's values of the stored codes, those approximate the (rotated) input, and
// the model runs close to the float one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "backend/cpu/packed_matmul.h"
#include "core/error.h"
#include "loader/quantization.h"
#include "loader/weight_store.h"
#include "loader_test_util.h"
#include "models/model.h"
#include "models/rotation_support.h"
#include "quant/affine.h"
#include "quant/quantize_checkpoint.h"
#include "quant/trellis.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::make_safetensors;
using test::StTensor;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

std::vector<float> random_values(size_t n, uint32_t seed, float mean, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(normal(rng)));
  return v;
}

StTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape, uint32_t seed,
                     float mean = 0.0f, float sd = 0.05f) {
  size_t n = 1;
  for (auto d : shape) n *= size_t(d);
  const auto v = random_values(n, seed, mean, sd);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(v[i]);
  return {name, "BF16", shape, test::raw(h)};
}

quant::QuantizeSpec trellis_spec(int bits) {
  quant::QuantizeSpec s;
  s.format = "trellis";
  s.params = {bits, 256};
  s.embedding_bits = 6;
  return s;
}

nlohmann::json trellis_entry(int bits, int axis) {
  return {{"group_size", 256},
          {"bits", bits},
          {"mode", "trellis"},
          {"trellis", {{"L", 12}, {"code", "1mad"}, {"axis", axis}}}};
}

TEST(QuantizeTrellis, AxisPolicy) {
  EXPECT_EQ(quant::trellis_axis_for("model.layers.0.mlp.down_proj"), 0);
  EXPECT_EQ(quant::trellis_axis_for("model.layers.0.mlp.experts.5.down_proj"), 0);
  EXPECT_EQ(quant::trellis_axis_for("model.layers.0.mlp.switch_mlp.down_proj"), 0);
  EXPECT_EQ(quant::trellis_axis_for("model.layers.0.mlp.shared_expert.down_proj"), 0);
  for (const char* m : {"model.layers.0.mlp.up_proj", "model.layers.0.mlp.gate_proj",
                        "model.layers.0.self_attn.o_proj", "model.layers.0.linear_attn.out_proj",
                        "model.layers.0.self_attn.q_proj", "model.layers.0.mlp.gate", "lm_head",
                        "model.layers.0.mlp.switch_mlp.up_proj"})
    EXPECT_EQ(quant::trellis_axis_for(m), 1) << m;
}

TEST(QuantizeTrellis, PlanEntriesAndNotices) {
  TempDir dir;
  const std::vector<StTensor> t = {
      bf16_tensor("model.embed_tokens.weight", {64, 256}, 1),
      bf16_tensor("lm_head.weight", {64, 256}, 2),
      bf16_tensor("model.layers.0.self_attn.q_proj.weight", {256, 256}, 3),
      bf16_tensor("model.layers.0.self_attn.o_proj.weight", {256, 96}, 4),
      bf16_tensor("model.layers.0.mlp.gate_proj.weight", {512, 256}, 5),
      bf16_tensor("model.layers.0.mlp.down_proj.weight", {256, 512}, 6),
      bf16_tensor("model.layers.1.mlp.down_proj.weight", {96, 512}, 7),
      bf16_tensor("model.layers.0.mlp.experts.0.down_proj.weight", {256, 128}, 8),
      bf16_tensor("model.layers.0.input_layernorm.weight", {256}, 9),
  };
  write_bytes(dir / "model.safetensors", make_safetensors(t));
  write_bytes(dir / "config.json", R"({"model_type": "llama"})");
  const WeightStore store = WeightStore::open(dir.path());

  const auto plan = quant::quantize_plan(store, trellis_spec(3));
  nlohmann::ordered_json want = trellis_entry(3, 1);
  const nlohmann::json affine6 = {{"group_size", 64}, {"bits", 6}, {"mode", "affine"}};
  want["lm_head"] = affine6;
  want["model.embed_tokens"] = affine6;
  want["model.layers.0.mlp.down_proj"] = trellis_entry(3, 0);
  want["model.layers.0.mlp.switch_mlp.down_proj"] = trellis_entry(3, 0);  // stacked experts
  want["model.layers.0.self_attn.o_proj"] = false;
  want["model.layers.1.mlp.down_proj"] = false;
  EXPECT_EQ(nlohmann::json(plan.quantization), nlohmann::json(want)) << plan.quantization.dump(2);
  auto notices = plan.notices;
  std::sort(notices.begin(), notices.end());
  EXPECT_EQ(notices,
            (std::vector<std::string>{"1 module stays bf16: input dim 96 not a multiple of 256 "
                                      "(model.layers.*.self_attn.o_proj)",
                                      "1 module stays bf16: output dim 96 not a multiple of 256 "
                                      "(model.layers.*.mlp.down_proj)"}));
  EXPECT_EQ(plan.n_quantized, 6);
  // Codes and scales of the stored matrix: Wᵀ for axis 0.
  for (const auto& p : plan.tensors) {
    if (p.module == "model.layers.0.mlp.down_proj") {
      EXPECT_EQ(p.outputs[0].shape, (std::vector<int64_t>{512, 256 * 3 / 32}));
      EXPECT_EQ(p.outputs[1].dtype, DType::F16);
      EXPECT_EQ(p.outputs[1].shape, (std::vector<int64_t>{512}));
    }
    if (p.module == "model.layers.0.mlp.gate_proj") {
      EXPECT_EQ(p.outputs[0].shape, (std::vector<int64_t>{512, 256 * 3 / 32}));
    }
  }

  // --module-bits is in trellis bits; the embedding and head follow --embedding-bits.
  auto spec = trellis_spec(2);
  spec.overrides = quant::parse_module_bits("mlp.gate_proj=4");
  spec.embedding_bits = 0;
  const auto mixed = quant::quantize_plan(store, spec);
  EXPECT_EQ(nlohmann::json(mixed.quantization["model.layers.0.mlp.gate_proj"]),
            trellis_entry(4, 1));
  EXPECT_EQ(mixed.quantization["model.embed_tokens"], false);
  ASSERT_EQ(mixed.notices.size(),
            3u);  // the embedding and head (first by name), o_proj, layer 1's down_proj
  EXPECT_THAT(mixed.notices[0], HasSubstr("2 modules stay bf16: --embedding-bits false"));

  // Refused options, each named.
  const auto refused = [&](quant::QuantizeSpec s) {
    return error_of([&] { quant::quantize_plan(store, s); });
  };
  auto s = trellis_spec(5);
  EXPECT_THAT(refused(s), HasSubstr("--bits: trellis bits must be 2, 3 or 4, got 5"));
  s = trellis_spec(3);
  s.params.group_size = 64;
  EXPECT_THAT(refused(s), HasSubstr("--group-size must be 256 for trellis"));
  s = trellis_spec(3);
  s.overrides = quant::parse_module_bits("lm_head=4");
  EXPECT_THAT(refused(s), HasSubstr("set by --embedding-bits"));
  s = trellis_spec(3);
  s.embedding_bits = 7;
  EXPECT_THAT(refused(s), HasSubstr("--embedding-bits must be 2, 3, 4, 5, 6 or 8"));
  s = trellis_spec(3);
  s.format = "none";
  s.overrides.clear();
  EXPECT_THAT(refused(s), HasSubstr("only useful with --rotate"));
}

// A llama model whose every linear fits the 256-weight block; tied embeddings; n_head query
// heads of 64 (4 KV heads).
void write_llama(const fs::path& dir, int n_head = 4) {
  const int64_t nq = 64 * int64_t(n_head);
  std::vector<StTensor> t = {bf16_tensor("model.embed_tokens.weight", {320, 256}, 1, 0, 0.5f),
                             bf16_tensor("model.norm.weight", {256}, 2, 1.0f, 0.1f)};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const uint32_t s = 10 * uint32_t(l + 1);
    t.push_back(bf16_tensor(p + "input_layernorm.weight", {256}, s, 1.0f, 0.1f));
    t.push_back(bf16_tensor(p + "post_attention_layernorm.weight", {256}, s + 1, 1.0f, 0.1f));
    t.push_back(bf16_tensor(p + "self_attn.q_proj.weight", {nq, 256}, s + 2));
    t.push_back(bf16_tensor(p + "self_attn.k_proj.weight", {256, 256}, s + 3));
    t.push_back(bf16_tensor(p + "self_attn.v_proj.weight", {256, 256}, s + 4));
    t.push_back(bf16_tensor(p + "self_attn.o_proj.weight", {256, nq}, s + 5));
    t.push_back(bf16_tensor(p + "mlp.gate_proj.weight", {512, 256}, s + 6));
    t.push_back(bf16_tensor(p + "mlp.up_proj.weight", {512, 256}, s + 7));
    t.push_back(bf16_tensor(p + "mlp.down_proj.weight", {256, 512}, s + 8));
  }
  fs::create_directories(dir);
  write_bytes(dir / "model.safetensors", make_safetensors(t));
  write_bytes(dir / "config.json", R"({"model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_attention_heads": )" +
                                       std::to_string(n_head) +
                                       R"(, "num_key_value_heads": 4,
    "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 320, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 128, "rope_theta": 10000.0, "tie_word_embeddings": true})");
}

std::vector<float> logits_of(const fs::path& dir, const std::vector<int32_t>& prompt,
                             const LoadOptions& options = {}) {
  auto model = load_model(dir, options);
  std::vector<float> logits(prompt.size() * size_t(model->info().n_vocab));
  auto s = model->new_sequence();
  model->forward(*s, prompt, LogitsRows::All, logits.data());
  return logits;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s / double(v.size()));
}

double relative_rms_error(const std::vector<float>& want, const std::vector<float>& got) {
  std::vector<float> d(want.size());
  for (size_t i = 0; i < want.size(); ++i) d[i] = got[i] - want[i];
  return rms(d) / rms(want);
}

// Each trellis module of `out` decodes, through the loader, to the reference decoder's values of
// its stored codes, and those are within `tolerance` (relative RMS) of `reference`'s weights.
void expect_modules_decode(const fs::path& out, const fs::path& reference, int bits,
                           double tolerance) {
  const auto config = nlohmann::json::parse(std::ifstream(out / "config.json"));
  WeightStore store = WeightStore::open(out);
  store.set_quantization(QuantizationConfig::from_json(config, "config.json"));
  const WeightStore ref = WeightStore::open(reference);
  int checked = 0;
  for (int l = 0; l < 2; ++l)
    for (const char* m : {"self_attn.q_proj", "self_attn.o_proj", "mlp.up_proj", "mlp.down_proj"}) {
      const std::string module = "model.layers." + std::to_string(l) + "." + m;
      SCOPED_TRACE(module);
      const int axis = quant::trellis_axis_for(module);
      ASSERT_EQ(config["quantization"].value(module, trellis_entry(bits, 1)),
                trellis_entry(bits, axis));
      const TensorInfo& in = *ref.find(module + ".weight");
      const int64_t out_dim = in.shape[0], in_dim = in.shape[1];
      const Tensor w = store.take(module + ".weight", {out_dim, in_dim});
      std::vector<float> got(static_cast<size_t>(out_dim * in_dim));
      cpu::packed_dequantize_rows(w, 0, out_dim, got.data());

      const int64_t rows = axis == 1 ? out_dim : in_dim, cols = axis == 1 ? in_dim : out_dim;
      std::vector<float> stored(got.size());
      quant::dequantize_trellis_rows(
          static_cast<const uint32_t*>(store.find(module + ".weight")->data),
          static_cast<const uint16_t*>(store.find(module + ".scales")->data), rows, cols, bits,
          stored.data());
      for (int64_t o = 0; o < out_dim; ++o)
        for (int64_t i = 0; i < in_dim; ++i) {
          const float want =
              axis == 1 ? stored[size_t(o * in_dim + i)] : stored[size_t(i * out_dim + o)];
          ASSERT_EQ(got[size_t(o * in_dim + i)], want) << o << "," << i;
        }
      std::vector<float> input(got.size());
      quant::affine_params_to_f32(static_cast<const uint8_t*>(in.data), in.dtype,
                                  int64_t(input.size()), input.data());
      EXPECT_LT(relative_rms_error(input, got), tolerance);
      ++checked;
    }
  EXPECT_EQ(checked, 8);
}

TEST(QuantizeTrellis, LlamaEndToEndWithAndWithoutRotation) {
  TempDir dir;
  write_llama(dir / "f");
  const std::vector<int32_t> prompt = {1, 17, 300, 42, 5, 99, 250, 7};
  const auto want = logits_of(dir / "f", prompt);

  // The rotated float model: the reference the rotated quantized one is measured against.
  quant::QuantizeOptions none;
  none.spec.format = "none";
  none.spec.rotation = quant::RotationSpec{3, rotation_norm_offset(dir / "f")};
  quant::quantize_checkpoint(dir / "f", dir / "r", none);
  EXPECT_LT(relative_rms_error(want, logits_of(dir / "r", prompt)), 0.01);

  for (bool rotate : {false, true}) {
    SCOPED_TRACE(rotate ? "rotated" : "plain");
    quant::QuantizeOptions o;
    o.spec = trellis_spec(4);
    if (rotate) o.spec.rotation = none.spec.rotation;
    o.n_threads = 2;
    const fs::path out = dir / (rotate ? "t4r" : "t4");
    const auto r = quant::quantize_checkpoint(dir / "f", out, o);
    EXPECT_EQ(r.n_quantized, rotate ? 14 + 2 : 14 + 1);  // + embedding (and the untied head)
    // 4-bit trellis codes i.i.d. data to ~7% RMS error (MSE 0.0055); rotated weights are
    // Gaussian-like, so the same holds after the rotation.
    expect_modules_decode(out, rotate ? dir / "r" : dir / "f", 4, 0.09);
    const auto config = nlohmann::json::parse(std::ifstream(out / "config.json"));
    EXPECT_EQ(config.contains("rotation"), rotate);
    const auto got = logits_of(out, prompt);
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(relative_rms_error(want, got), 0.15);
  }
}

// Tensor parallelism cuts trellis weights along whole blocks: column-parallel rows (q, k, v,
// gate, up) are views of the rows, o_proj's inputs whole 256-weight blocks of each row (a copy;
// the row's scale serves them), down_proj, stored transposed, its stored rows (a view); the
// vocabulary shards are rows of the affine embedding. Split over 2 ranks the model gives the
// whole one's logits up to the order of the all-reduced sums; over 4, o_proj's 128 inputs per
// rank would cut a block, which is refused naming the tensor and the numbers.
TEST(QuantizeTrellis, TensorParallelSplitsAlongWholeBlocks) {
  TempDir dir;
  write_llama(dir / "f", 8);
  quant::QuantizeOptions o;
  o.spec = trellis_spec(2);
  o.n_threads = 2;
  quant::quantize_checkpoint(dir / "f", dir / "t2", o);
  const std::vector<int32_t> prompt = {1, 17, 300, 42, 5, 99, 250, 7};
  const auto whole = logits_of(dir / "t2", prompt);
  LoadOptions split;
  split.tensor_parallel = 2;
  const auto got = logits_of(dir / "t2", prompt, split);
  double worst = 0;
  for (size_t i = 0; i < whole.size(); ++i)
    worst = std::max(worst, double(std::fabs(got[i] - whole[i])));
  EXPECT_LT(worst, 1e-5 * rms(whole)) << "rms " << rms(whole);
  split.tensor_parallel = 4;
  EXPECT_THAT(error_of([&] { load_model(dir / "t2", split); }),
              HasSubstr("model.layers.0.self_attn.o_proj.weight: its 512 inputs split over 4 "
                        "ranks give 128 each, not whole trellis blocks of 256"));
}

}  // namespace
}  // namespace hearth
