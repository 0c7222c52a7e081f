// `hearth quantize` from the bottom up: the safetensors writer read back by hearth's reader
// (bytes, alignment, shards), the plan (what is quantized, overrides, notices, config.json's
// quantization object), the codes of a quantized checkpoint against its input, atomicity (no
// OUT and no partial directory after a failure), the fixtures end to end and the command line.
#include "quant/quantize_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/error.h"
#include "loader/safetensors.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"
#include "loader_test_util.h"
#include "quant/affine.h"
#include "run_command.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::make_safetensors;
using test::raw;
using test::read_bytes;
using test::StTensor;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

// Deterministic bytes for a tensor.
std::string pattern_bytes(size_t n, uint8_t seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char(uint8_t(i * 131 + seed * 7 + (i >> 8)));
  return s;
}

// Entries of every width, with odd element counts so that name order alone would misalign.
std::vector<SafetensorsEntry> mixed_entries() {
  return {{"b.bf16", DType::BF16, {3, 1}}, {"a.u8", DType::U8, {5}},
          {"c.u32", DType::U32, {2, 3}},   {"d.f16", DType::F16, {7}},
          {"e.i64", DType::I64, {3}},      {"f.empty", DType::F32, {0, 4}},
          {"g.scalar", DType::F32, {}},    {"h.f32", DType::F32, {1, 5}}};
}

void write_all(SafetensorsWriter& w, const std::vector<SafetensorsEntry>& entries) {
  // In reverse order: the writer takes tensors in any order.
  for (size_t i = entries.size(); i-- > 0;) {
    const std::string bytes = pattern_bytes(entries[i].nbytes(), uint8_t(i));
    w.write(entries[i].name, bytes.data(), bytes.size());
  }
}

TEST(SafetensorsWriter, RoundTripsThroughTheReaderAligned) {
  TempDir dir;
  const auto entries = mixed_entries();
  SafetensorsWriter w(dir.path(), entries, {size_t(1) << 30, {{"format", "mlx"}}});
  write_all(w, entries);
  const auto paths = w.finish();
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0].filename(), "model.safetensors");
  EXPECT_EQ(paths[1].filename(), "model.safetensors.index.json");  // mlx-lm writes one always
  const auto index = nlohmann::json::parse(read_bytes(paths[1]));
  EXPECT_EQ(index["weight_map"]["c.u32"], "model.safetensors");

  const std::string bytes = read_bytes(paths[0]);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t(uint8_t(bytes[size_t(i)])) << (8 * i);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  size_t data = 0;
  for (const auto& e : entries) data += e.nbytes();
  EXPECT_EQ(bytes.size(), 8 + header_len + data) << "no holes between tensors";
  EXPECT_EQ(w.file_bytes(), bytes.size());

  auto file = SafetensorsFile::open(paths[0]);
  EXPECT_EQ(file.metadata().at("format"), "mlx");
  ASSERT_EQ(file.tensors().size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto* t = file.find(entries[i].name);
    ASSERT_NE(t, nullptr) << entries[i].name;
    EXPECT_EQ(t->dtype, entries[i].dtype);
    EXPECT_EQ(t->shape, entries[i].shape);
    EXPECT_EQ(std::string(static_cast<const char*>(t->data), t->nbytes),
              pattern_bytes(entries[i].nbytes(), uint8_t(i)));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->dtype), 0u) << t->name;
  }
}

TEST(SafetensorsWriter, ShardsAtTheLimitWithAnIndexTheStoreLoads) {
  TempDir dir;
  const auto entries = mixed_entries();
  SafetensorsWriter w(dir.path(), entries, {24, {}});
  write_all(w, entries);
  w.finish();
  ASSERT_GT(w.n_files(), 2u);
  const std::string last =
      fmt::format("model-{:05}-of-{:05}.safetensors", w.n_files(), w.n_files());
  const std::string first = fmt::format("model-00001-of-{:05}.safetensors", w.n_files());
  EXPECT_TRUE(fs::exists(dir / last));
  EXPECT_TRUE(fs::exists(dir / first));

  const auto index = nlohmann::json::parse(read_bytes(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), w.data_bytes());
  EXPECT_EQ(index["weight_map"].size(), entries.size());
  // Shards hold runs of names: the first name is in the first shard.
  EXPECT_EQ(index["weight_map"]["a.u8"], first);
  for (const auto& [name, file] : index["weight_map"].items()) {
    auto f = SafetensorsFile::open(dir / file.get<std::string>());
    size_t bytes = 0;
    for (const auto& t : f.tensors()) bytes += t.nbytes;
    EXPECT_LE(bytes, 24u) << file;
  }
  auto store = WeightStore::open(dir.path());
  ASSERT_EQ(store.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto* t = store.find(entries[i].name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(std::string(static_cast<const char*>(t->data), t->nbytes),
              pattern_bytes(entries[i].nbytes(), uint8_t(i)));
  }
}

TEST(SafetensorsWriter, RejectsMisuse) {
  TempDir dir;
  const std::vector<SafetensorsEntry> entries = {{"x", DType::F32, {2}}, {"y", DType::F32, {1}}};
  EXPECT_THAT(error_of([&] {
                SafetensorsWriter w(dir.path(), {{"x", DType::F32, {1}}, {"x", DType::F16, {1}}});
              }),
              HasSubstr("'x' is given twice"));
  SafetensorsWriter w(dir.path(), entries);
  const float v[2] = {1, 2};
  EXPECT_THAT(error_of([&] { w.write("z", v, 4); }), HasSubstr("'z' is not in the layout"));
  EXPECT_THAT(error_of([&] { w.write("x", v, 4); }), HasSubstr("has 4 bytes, the layout says 8"));
  w.write("x", v, 8);
  EXPECT_THAT(error_of([&] { w.write("x", v, 8); }), HasSubstr("'x' is written twice"));
  EXPECT_THAT(error_of([&] { w.finish(); }), HasSubstr("'y' was never written"));
}

TEST(SafetensorsWriter, WritesATensorInConsecutiveParts) {
  TempDir dir;
  SafetensorsWriter w(dir.path(), {{"stack", DType::F32, {3, 2}}, {"y", DType::F32, {1}}});
  const float a[4] = {1, 2, 3, 4}, b[2] = {5, 6};
  w.write_part("stack", a, 8);
  w.write_part("stack", a + 2, 8);
  EXPECT_THAT(error_of([&] { w.write("stack", a, 24); }), HasSubstr("'stack' is written twice"));
  EXPECT_THAT(error_of([&] { w.write_part("stack", a, 16); }),
              HasSubstr("gets 16 more bytes after 16, the layout says 24 in all"));
  w.write("y", b, 4);
  EXPECT_THAT(error_of([&] { w.finish(); }),
              HasSubstr("'stack' was written in part (16 of 24 bytes)"));
  w.write_part("stack", b, 8);
  w.finish();
  auto file = SafetensorsFile::open(dir / "model.safetensors");
  const auto* t = file.find("stack");
  ASSERT_NE(t, nullptr);
  const float want[6] = {1, 2, 3, 4, 5, 6};
  EXPECT_EQ(std::memcmp(t->data, want, sizeof(want)), 0);
}

// ---- the plan ---------------------------------------------------------------------------------

std::string bf16_bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_bf16(v[i]);
  return raw(h);
}

// Random N(0, 0.02)-ish weights with a few larger ones, bf16-rounded, as f32.
std::vector<float> random_weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(normal(rng)));
  v[n / 3] = 0.25f;  // an outlier, as real weights have
  return v;
}

StTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape, uint32_t seed) {
  size_t n = 1;
  for (auto d : shape) n *= size_t(d);
  return {name, "BF16", shape, bf16_bytes(random_weights(n, seed))};
}

// A small llama-like checkpoint with every kind of tensor the plan distinguishes.
void write_checkpoint(const fs::path& dir, std::vector<StTensor> extra = {}) {
  std::vector<StTensor> t = {
      bf16_tensor("model.embed_tokens.weight", {32, 64}, 1),
      bf16_tensor("model.layers.0.self_attn.q_proj.weight", {64, 64}, 2),
      bf16_tensor("model.layers.0.self_attn.q_proj.bias", {64}, 3),
      bf16_tensor("model.layers.0.self_attn.q_norm.weight", {16}, 4),
      bf16_tensor("model.layers.0.mlp.down_proj.weight", {64, 96}, 5),
      bf16_tensor("model.layers.1.mlp.down_proj.weight", {64, 96}, 6),
      bf16_tensor("model.layers.0.mlp.experts.0.up_proj.weight", {32, 64}, 7),
      bf16_tensor("model.layers.0.linear_attn.conv1d.weight", {8, 1, 4}, 8),
      bf16_tensor("model.layers.0.input_layernorm.weight", {64}, 9),
      bf16_tensor("model.visual.blocks.0.attn.qkv.weight", {96, 64}, 10),
      bf16_tensor("model.norm.weight", {64}, 11),
  };
  t.insert(t.end(), extra.begin(), extra.end());
  std::filesystem::create_directories(dir);
  write_bytes(dir / "model.safetensors", make_safetensors(t, {{"format", "pt"}}));
  write_bytes(dir / "config.json", R"({"model_type": "llama", "hidden_size": 64})");
  write_bytes(dir / "tokenizer.json", R"({"model": {}})");
  write_bytes(dir / "chat_template.jinja", "{{ messages }}");
  write_bytes(dir / "pytorch_model.bin", "old weights");
}

std::vector<std::string> quantized_modules(const quant::QuantizePlan& plan) {
  std::vector<std::string> out;
  for (const auto& t : plan.tensors)
    if (t.quantized()) out.push_back(t.module);
  return out;
}

TEST(QuantizePlan, QuantizesLinearAndEmbeddingWeightsThatFit) {
  TempDir dir;
  write_checkpoint(dir.path());
  auto store = WeightStore::open(dir.path());
  quant::QuantizeSpec spec;
  spec.params = {4, 64};
  auto plan = quant::quantize_plan(store, spec);
  EXPECT_THAT(quantized_modules(plan),
              ::testing::ElementsAre("model.embed_tokens", "model.layers.0.mlp.switch_mlp.up_proj",
                                     "model.layers.0.self_attn.q_proj"));
  EXPECT_EQ(plan.tensors.size(), store.size());
  EXPECT_EQ(plan.n_quantized, 3);
  EXPECT_EQ(plan.quantized_params, 32 * 64 + 32 * 64 + 64 * 64);
  for (const auto& t : plan.tensors) {
    ASSERT_EQ(t.parts.size(), 1u);  // the one expert is a stack of one
    const TensorInfo& input = *t.parts[0].source.info;
    if (!t.quantized()) {
      ASSERT_EQ(t.outputs.size(), 1u);
      EXPECT_EQ(t.outputs[0].name, input.name);
      EXPECT_EQ(t.outputs[0].dtype, input.dtype);
      continue;
    }
    ASSERT_EQ(t.outputs.size(), 3u);
    const int64_t rows = input.shape[0];
    // Stacked experts ([E, rows, cols]) get their experts' outputs with E in front.
    std::vector<int64_t> lead;
    if (t.module.ends_with("switch_mlp.up_proj")) lead = {1};
    const auto shape = [&](std::vector<int64_t> s) {
      s.insert(s.begin(), lead.begin(), lead.end());
      return s;
    };
    EXPECT_EQ(t.outputs[0].name, t.module + ".weight");
    EXPECT_EQ(t.outputs[0].dtype, DType::U32);
    EXPECT_EQ(t.outputs[0].shape, shape({rows, 64 * 4 / 32}));
    EXPECT_EQ(t.outputs[1].name, t.module + ".scales");
    EXPECT_EQ(t.outputs[1].dtype, DType::BF16);
    EXPECT_EQ(t.outputs[1].shape, shape({rows, 1}));
    EXPECT_EQ(t.outputs[2].name, t.module + ".biases");
  }
  EXPECT_THAT(plan.notices,
              ::testing::ElementsAre(
                  "2 modules stay bf16: last dim 96 not a multiple of 64 "
                  "(model.layers.*.mlp.down_proj)",
                  "1 module stays bf16: vision/audio encoder, kept in float as mlx-vlm does "
                  "(model.visual.blocks.*.attn.qkv)"));
  const nlohmann::ordered_json expected = nlohmann::ordered_json::parse(R"({
    "group_size": 64, "bits": 4, "mode": "affine",
    "model.layers.0.mlp.down_proj": false,
    "model.layers.1.mlp.down_proj": false,
    "model.visual.blocks.0.attn.qkv": false})");
  EXPECT_EQ(plan.quantization.dump(), expected.dump());
}

TEST(QuantizePlan, OverridesMatchSuffixesAndFalseKeepsFloat) {
  TempDir dir;
  write_checkpoint(dir.path());
  auto store = WeightStore::open(dir.path());
  quant::QuantizeSpec spec;
  spec.params = {4, 32};
  spec.overrides = quant::parse_module_bits(
      " mlp.down_proj=8 , self_attn.q_proj=false,"
      "layers.1.mlp.down_proj=6");
  auto plan = quant::quantize_plan(store, spec);
  std::map<std::string, int> bits;
  for (const auto& t : plan.tensors)
    if (t.quantized()) bits[t.module] = t.params.bits;
  EXPECT_EQ(bits, (std::map<std::string, int>{{"model.embed_tokens", 4},
                                              {"model.layers.0.mlp.down_proj", 8},
                                              {"model.layers.0.mlp.switch_mlp.up_proj", 4},
                                              {"model.layers.1.mlp.down_proj", 6}}));
  const auto& q = plan.quantization;
  EXPECT_EQ(q["bits"], 4);
  EXPECT_EQ(q["group_size"], 32);
  EXPECT_EQ(q["model.layers.0.mlp.down_proj"].dump(),
            R"({"group_size":32,"bits":8,"mode":"affine"})");
  EXPECT_EQ(q["model.layers.1.mlp.down_proj"]["bits"], 6);  // the longest suffix wins
  EXPECT_EQ(q["model.layers.0.self_attn.q_proj"], false);
  EXPECT_FALSE(q.contains("model.embed_tokens"));  // default parameters are not repeated
  EXPECT_THAT(plan.notices[0], HasSubstr("1 module stays bf16: --module-bits says false "
                                         "(model.layers.*.self_attn.q_proj)"));
  // Suffixes match whole parts of the path only.
  spec.overrides = quant::parse_module_bits("proj=8");
  EXPECT_THAT(error_of([&] { quant::quantize_plan(store, spec); }),
              HasSubstr("'proj' matches no linear or embedding module"));
}

TEST(QuantizePlan, RejectsBadParametersAndOverrides) {
  TempDir dir;
  write_checkpoint(dir.path());
  auto store = WeightStore::open(dir.path());
  auto plan_error = [&](const std::string& format, int bits, int group, const std::string& mb) {
    quant::QuantizeSpec spec{format, {bits, group}, quant::parse_module_bits(mb)};
    return error_of([&] { quant::quantize_plan(store, spec); });
  };
  EXPECT_THAT(plan_error("affine", 7, 64, ""), HasSubstr("--bits must be 2, 3, 4, 5, 6 or 8"));
  EXPECT_THAT(plan_error("affine", 4, 16, ""), HasSubstr("--group-size must be 32, 64 or 128"));
  EXPECT_THAT(plan_error("gguf", 4, 64, ""),
              HasSubstr("unknown format 'gguf' (available: affine, trellis, none)"));
  EXPECT_THAT(plan_error("trellis", 4, 64, ""), HasSubstr("--group-size must be 256 for trellis"));
  EXPECT_THAT(plan_error("affine", 4, 64, "q_proj=7"), HasSubstr("--module-bits q_proj=7"));
  for (const char* bad : {"q_proj", "q_proj=", "q_proj=four", "=4", "q_proj=4,,k_proj=4",
                          "q_proj.weight=4", "q_proj=4,q_proj=8", ".q_proj=4"})
    EXPECT_THAT(error_of([&] { quant::parse_module_bits(bad); }), HasSubstr("--module-bits"))
        << bad;
  EXPECT_TRUE(quant::parse_module_bits("  ").empty());
}

// ---- the run ----------------------------------------------------------------------------------

bool has_partial_dir(const fs::path& out) {
  for (const auto& e : fs::directory_iterator(out.parent_path()))
    if (e.path().filename().string().starts_with(out.filename().string() + ".partial-"))
      return true;
  return false;
}

quant::QuantizeOptions options(int bits, int group, int threads = 2) {
  quant::QuantizeOptions o;
  o.spec.params = {bits, group};
  o.n_threads = threads;
  return o;
}

// Dequantizes `module` of `out` and checks that each weight of `input` got the code closest to
// it for the stored (rounded) scale and bias, and that nearly all are within half a step: only a
// group's extreme values can lie outside the range the codes span (MLX makes the end farther
// from zero exact, which can shorten the other end by up to a step).
void expect_codes_fit(const WeightStore& out, const std::string& module,
                      const std::vector<float>& input, int64_t rows, int64_t cols, int bits,
                      int group, DType param_dtype) {
  const auto* w = out.find(module + ".weight");
  const auto* s = out.find(module + ".scales");
  const auto* b = out.find(module + ".biases");
  ASSERT_TRUE(w && s && b) << module;
  EXPECT_EQ(w->dtype, DType::U32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{rows, cols * bits / 32}));
  EXPECT_EQ(s->dtype, param_dtype);
  EXPECT_EQ(b->dtype, param_dtype);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{rows, cols / group}));
  EXPECT_EQ(b->shape, (std::vector<int64_t>{rows, cols / group}));
  const int64_t groups = cols / group;
  std::vector<float> scales(static_cast<size_t>(groups)), biases(static_cast<size_t>(groups)),
      deq(static_cast<size_t>(cols));
  int64_t within_half_step = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const size_t po = size_t(r * groups) * dtype_size(param_dtype);
    quant::affine_params_to_f32(static_cast<const uint8_t*>(s->data) + po, param_dtype, groups,
                                scales.data());
    quant::affine_params_to_f32(static_cast<const uint8_t*>(b->data) + po, param_dtype, groups,
                                biases.data());
    quant::affine_dequantize_row(static_cast<const uint32_t*>(w->data) + r * (cols * bits / 32),
                                 scales.data(), biases.data(), cols, bits, group, deq.data());
    for (int64_t c = 0; c < cols; ++c) {
      const float sc = scales[size_t(c / group)], bias = biases[size_t(c / group)];
      const double x = input[size_t(r * cols + c)];
      double best = INFINITY;
      for (int q = 0; q < (1 << bits); ++q)
        best = std::min(best, std::fabs(double(sc * float(q) + bias) - x));
      const double err = std::fabs(double(deq[size_t(c)]) - x);
      ASSERT_LE(err, best + 1e-7) << module << " row " << r << " col " << c;
      within_half_step += err <= 0.5 * std::fabs(sc) * (1 + 1e-5);
    }
  }
  EXPECT_GT(double(within_half_step), 0.95 * double(rows * cols)) << module;
}

TEST(QuantizeCheckpoint, CodesScalesAndBiasesReproduceTheInput) {
  TempDir dir;
  const auto in = dir / "in";
  const auto w_f32 = random_weights(48 * 128, 21);
  const auto w_f16 = random_weights(16 * 64, 22);
  std::vector<uint16_t> f16(w_f16.size());
  for (size_t i = 0; i < f16.size(); ++i) f16[i] = f32_to_f16(w_f16[i]);
  write_checkpoint(in, {{"model.layers.0.mlp.gate_proj.weight", "F32", {48, 128}, raw(w_f32)},
                        {"model.layers.0.mlp.up_proj.weight", "F16", {16, 64}, raw(f16)}});
  std::vector<float> w_f16_exact(f16.size());
  for (size_t i = 0; i < f16.size(); ++i) w_f16_exact[i] = f16_to_f32(f16[i]);
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    const auto out = dir / ("out" + std::to_string(bits));
    auto result = quant::quantize_checkpoint(in, out, options(bits, 32));
    EXPECT_EQ(result.n_quantized, 7);
    EXPECT_FALSE(has_partial_dir(out));
    auto store = WeightStore::open(out);
    expect_codes_fit(store, "model.layers.0.self_attn.q_proj", random_weights(64 * 64, 2), 64, 64,
                     bits, 32, DType::BF16);
    expect_codes_fit(store, "model.layers.0.mlp.down_proj", random_weights(64 * 96, 5), 64, 96,
                     bits, 32, DType::BF16);
    expect_codes_fit(store, "model.layers.0.mlp.gate_proj", w_f32, 48, 128, bits, 32, DType::F32);
    expect_codes_fit(store, "model.layers.0.mlp.up_proj", w_f16_exact, 16, 64, bits, 32,
                     DType::F16);
  }
}

TEST(QuantizeCheckpoint, WritesAnMlxCheckpoint) {
  TempDir dir;
  const auto in = dir / "in";
  write_checkpoint(in);
  const auto out = dir / "nested" / "out";
  auto o = options(4, 64);
  o.spec.overrides = quant::parse_module_bits("embed_tokens=8");
  std::vector<std::string> notices;
  o.on_plan = [&](const quant::QuantizePlan& p) { notices = p.notices; };
  int64_t last_done = 0;
  o.on_progress = [&](const quant::QuantizeProgress& p) {
    EXPECT_EQ(p.modules_done, last_done + 1);
    last_done = p.modules_done;
    EXPECT_EQ(p.modules_total, 3);
  };
  auto r = quant::quantize_checkpoint(in, out, o);
  EXPECT_EQ(last_done, 3);
  EXPECT_EQ(notices.size(), 2u);
  EXPECT_EQ(r.out, out);
  EXPECT_EQ(r.n_files, 1u);
  EXPECT_EQ(r.output_bytes, fs::file_size(out / "model.safetensors"));
  // embed_tokens [32, 64] at 8 bits: 2048 B of codes + 2 × 64 B of scales and biases; q_proj
  // [64, 64] at 4 bits: 2048 + 2 × 128; the experts' up_proj, stacked ([1, 32, 64]) at 4 bits:
  // 1024 + 2 × 64.
  EXPECT_EQ(r.quantized_bytes, 2176u + 2304u + 1152u);
  EXPECT_FALSE(has_partial_dir(out));

  // Side files are copied; the weights are not copied as such.
  EXPECT_EQ(read_bytes(out / "tokenizer.json"), read_bytes(in / "tokenizer.json"));
  EXPECT_EQ(read_bytes(out / "chat_template.jinja"), "{{ messages }}");
  EXPECT_FALSE(fs::exists(out / "pytorch_model.bin"));
  EXPECT_TRUE(fs::exists(out / "model.safetensors.index.json"));
  auto file = SafetensorsFile::open(out / "model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "mlx");

  // Unquantized tensors are byte for byte the input's.
  auto in_store = WeightStore::open(in);
  auto store = WeightStore::open(out);
  for (const char* name :
       {"model.layers.0.self_attn.q_proj.bias", "model.layers.0.linear_attn.conv1d.weight",
        "model.layers.0.mlp.down_proj.weight", "model.visual.blocks.0.attn.qkv.weight",
        "model.norm.weight"}) {
    const auto* a = in_store.find(name);
    const auto* b = store.find(name);
    ASSERT_TRUE(a && b) << name;
    EXPECT_EQ(a->dtype, b->dtype);
    EXPECT_EQ(a->shape, b->shape);
    EXPECT_EQ(std::string(static_cast<const char*>(a->data), a->nbytes),
              std::string(static_cast<const char*>(b->data), b->nbytes));
  }
  EXPECT_EQ(store.find("model.embed_tokens.weight")->shape, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(store.find("model.embed_tokens.scales")->dtype, DType::BF16);

  // config.json: the input's keys, then the quantization object twice, as mlx-lm writes it.
  const auto config = nlohmann::ordered_json::parse(read_bytes(out / "config.json"));
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["hidden_size"], 64);
  const auto expected = nlohmann::ordered_json::parse(R"({
    "group_size": 64, "bits": 4, "mode": "affine",
    "model.embed_tokens": {"group_size": 64, "bits": 8, "mode": "affine"},
    "model.layers.0.mlp.down_proj": false,
    "model.layers.1.mlp.down_proj": false,
    "model.visual.blocks.0.attn.qkv": false})");
  EXPECT_EQ(config["quantization"].dump(), expected.dump());
  EXPECT_EQ(config["quantization_config"].dump(), expected.dump());
}

TEST(QuantizeCheckpoint, ExistingOutputIsAnErrorAndUntouched) {
  TempDir dir;
  write_checkpoint(dir / "in");
  fs::create_directories(dir / "out");
  write_bytes(dir / "out" / "mine.txt", "keep");
  EXPECT_THAT(
      error_of([&] { quant::quantize_checkpoint(dir / "in", dir / "out", options(4, 64)); }),
      HasSubstr("already exists"));
  EXPECT_EQ(read_bytes(dir / "out" / "mine.txt"), "keep");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "out"), fs::directory_iterator()), 1);
  EXPECT_FALSE(has_partial_dir(dir / "out"));
  // A trailing slash names the same directory.
  EXPECT_THAT(error_of([&] {
                quant::quantize_checkpoint(dir / "in", (dir / "out").string() + "/",
                                           options(4, 64));
              }),
              HasSubstr("already exists"));
}

TEST(QuantizeCheckpoint, FailureMidwayLeavesNothing) {
  TempDir dir;
  write_checkpoint(dir / "in");
  const auto out = dir / "out";
  // A cancel (what SIGINT sets) after the first module.
  std::atomic<bool> cancel{false};
  auto o = options(4, 64);
  o.cancel = &cancel;
  o.on_progress = [&](const quant::QuantizeProgress&) { cancel = true; };
  EXPECT_THAT(error_of([&] { quant::quantize_checkpoint(dir / "in", out, o); }),
              HasSubstr("interrupted"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(has_partial_dir(out));
  // Any error on the way (here thrown by the callback) cleans up the same way.
  o.cancel = nullptr;
  o.on_progress = [&](const quant::QuantizeProgress& p) {
    if (p.modules_done == 2) fail("disk full");
  };
  EXPECT_THAT(error_of([&] { quant::quantize_checkpoint(dir / "in", out, o); }),
              HasSubstr("disk full"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(has_partial_dir(out));
  // And then a clean run succeeds.
  quant::quantize_checkpoint(dir / "in", out, options(4, 64));
  EXPECT_TRUE(fs::exists(out / "config.json"));
}

TEST(QuantizeCheckpoint, RejectsInputsThatAreNotFloatCheckpoints) {
  TempDir dir;
  fs::create_directories(dir / "empty");
  EXPECT_THAT(
      error_of([&] { quant::quantize_checkpoint(dir / "empty", dir / "out", options(4, 64)); }),
      HasSubstr("is not a checkpoint directory"));
  write_checkpoint(dir / "in");
  quant::quantize_checkpoint(dir / "in", dir / "q", options(4, 64));
  EXPECT_THAT(error_of([&] { quant::quantize_checkpoint(dir / "q", dir / "qq", options(4, 64)); }),
              HasSubstr("already quantized"));
  EXPECT_FALSE(fs::exists(dir / "qq"));
  // Bad options fail before anything is written.
  EXPECT_THAT(error_of([&] { quant::quantize_checkpoint(dir / "in", dir / "x", options(9, 64)); }),
              HasSubstr("--bits"));
  EXPECT_FALSE(fs::exists(dir / "x"));
  EXPECT_FALSE(has_partial_dir(dir / "x"));
}

// ---- the fixtures end to end ------------------------------------------------------------------

const fs::path kModels = fs::path(HEARTH_TEST_DATA) / "models";

TEST(QuantizeCheckpoint, LlamaFixturesEndToEnd) {
  TempDir dir;
  for (const char* model : {"llama", "llama_tied"}) {
    SCOPED_TRACE(model);
    const auto out = dir / model;
    quant::quantize_checkpoint(kModels / model, out, options(4, 32));
    auto in = WeightStore::open(kModels / model);
    auto store = WeightStore::open(out);
    std::vector<std::string> expected;
    for (const auto& name : in.names()) {
      const auto* t = in.find(name);
      if (t->shape.size() == 2) {
        const std::string module = name.substr(0, name.size() - 7);
        for (const char* part : {".weight", ".scales", ".biases"})
          expected.push_back(module + part);
      } else {
        expected.push_back(name);
      }
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(store.names(), expected);
    // Tied embeddings: the embedding is quantized (it serves as the head), no lm_head appears.
    EXPECT_EQ(store.find("model.embed_tokens.weight")->dtype, DType::U32);
    EXPECT_EQ(store.contains("lm_head.weight"), std::string(model) == "llama");
    EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  }
}

TEST(QuantizeCheckpoint, ShardedOutputLoads) {
  TempDir dir;
  auto o = options(4, 64);
  o.writer.max_shard_bytes = 40000;
  auto r = quant::quantize_checkpoint(kModels / "qwen3_moe", dir / "out", o);
  EXPECT_GT(r.n_files, 1u);
  EXPECT_TRUE(fs::exists(dir / "out" / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "out" / "model.safetensors"));
  auto store = WeightStore::open(dir / "out");
  EXPECT_EQ(store.find("model.layers.0.mlp.switch_mlp.up_proj.scales")->shape,
            (std::vector<int64_t>{8, 16, 1}));  // experts stacked as mlx-lm has them
  EXPECT_TRUE(store.contains("model.layers.0.mlp.gate.biases"));
  EXPECT_EQ(store.find("model.layers.0.self_attn.q_norm.weight")->dtype, DType::BF16);
  EXPECT_EQ(store.total_bytes(), r.output_tensor_bytes);
}

// ---- the command line -------------------------------------------------------------------------

test::CommandResult run_hearth(const std::string& args) {
  return test::run_command(std::string(HEARTH_BINARY) + " " + args + " 2>&1");
}

TEST(QuantizeCli, QuantizesAndReportsOrFailsInOneLine) {
  TempDir dir;
  const std::string in = (kModels / "llama").string();
  const std::string out = (dir / "q4").string();
  auto r = run_hearth("quantize -m " + in + " -o " + out + " --bits 4 --group-size 64 -t 1");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("2 modules stay bf16: last dim 96 not a multiple of 64 "
                               "(model.layers.*.mlp.down_proj)"));
  EXPECT_THAT(r.out, HasSubstr("bits per weight: 4.500 in quantized modules"));
  EXPECT_THAT(r.out, HasSubstr("14 modules quantized"));

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"-o " + out, "already exists"},
           {"-o " + out + "x --bits 7", "--bits must be 2, 3, 4, 5, 6 or 8"},
           {"-o " + out + "x --group-size 48", "--group-size must be 32, 64 or 128"},
           {"-o " + out + "x --format trellis --group-size 64", "--group-size must be 256"},
           {"-o " + out + "x --format trellis --embedding-bits 7", "--embedding-bits must be"},
           {"-o " + out + "x --format none", "only useful with --rotate"},
           {"-o " + out + "x --seed 3", "give --rotate too"},
           {"-o " + out + "x --format q4_k", "unknown format 'q4_k'"},
           {"-o " + out + "x --module-bits mlp.down_proj", "expected MODULE=BITS"},
       }) {
    auto bad = run_hearth("quantize -m " + in + " " + args);
    EXPECT_EQ(bad.status, 1) << args << "\n" << bad.out;
    EXPECT_THAT(bad.out, HasSubstr(message)) << args;
  }
  auto not_ckpt = run_hearth("quantize -m " + dir.path().string() + " -o " + out + "y");
  EXPECT_EQ(not_ckpt.status, 1);
  EXPECT_THAT(not_ckpt.out, HasSubstr("is not a checkpoint directory"));
  EXPECT_FALSE(fs::exists(out + "x"));
}

}  // namespace
}  // namespace hearth
