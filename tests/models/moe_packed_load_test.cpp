// Loading MoE experts stacked and quantized as mlx-community publishes them: a hand-made layer with
// `mlp.switch_mlp.{gate,up,down}_proj.{weight,scales,biases}` (MLX affine, [E, out, ..]) and
// per-module entries keyed by mlx-lm's module paths (the down projections and the router at 8
// bits). Each expert must be a 2-D packed view of its own slice of the codes, scales and biases,
// read with its module's bits; a stacked tensor of the wrong shape must fail naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "loader/weight_store.h"
#include "models/moe.h"
#include "unit/loader_test_util.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::StTensor;
using ::testing::HasSubstr;

constexpr int64_t kE = 3, kH = 64, kI = 32, kGroup = 32;
const std::string kLayer = "model.layers.0.mlp.";

// Bytes that differ from tensor to tensor and from expert to expert.
std::string pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char(uint8_t(i * 37 + size_t(seed) * 101 + (i >> 7)));
  return s;
}

// A packed module: U32 codes [.., out, in·bits/32], BF16 scales and biases [.., out, in/group].
void add_module(std::vector<StTensor>& t, const std::string& module, std::vector<int64_t> lead,
                int64_t out, int64_t in, int bits, int seed) {
  int64_t n = out;
  for (int64_t d : lead) n *= d;
  std::vector<int64_t> codes = lead, params = lead;
  codes.insert(codes.end(), {out, in * bits / 32});
  params.insert(params.end(), {out, in / kGroup});
  t.push_back({module + ".weight", "U32", codes, pattern(size_t(n * in * bits / 8), seed)});
  t.push_back({module + ".scales", "BF16", params, pattern(size_t(n * in / kGroup * 2), seed + 1)});
  t.push_back({module + ".biases", "BF16", params, pattern(size_t(n * in / kGroup * 2), seed + 2)});
}

std::vector<StTensor> stacked_layer() {
  std::vector<StTensor> t;
  add_module(t, kLayer + "gate", {}, kE, kH, 8, 10);
  add_module(t, kLayer + "switch_mlp.gate_proj", {kE}, kI, kH, 4, 20);
  add_module(t, kLayer + "switch_mlp.up_proj", {kE}, kI, kH, 4, 30);
  add_module(t, kLayer + "switch_mlp.down_proj", {kE}, kH, kI, 8, 40);
  return t;
}

// mlx-lm's config.json for it: 4-bit g32 by default, the router and down projections at 8.
QuantizationConfig stacked_quantization() {
  const nlohmann::json entry8 = {{"group_size", kGroup}, {"bits", 8}};
  const nlohmann::json config = {{"quantization",
                                  {{"group_size", kGroup},
                                   {"bits", 4},
                                   {kLayer + "gate", entry8},
                                   {kLayer + "switch_mlp.down_proj", entry8}}}};
  return QuantizationConfig::from_json(config, "config.json");
}

WeightStore open_layer(const test::TempDir& dir, const std::vector<StTensor>& tensors) {
  test::write_bytes(dir / "model.safetensors", test::make_safetensors(tensors));
  WeightStore store = WeightStore::open(dir.path());
  store.set_quantization(stacked_quantization());
  return store;
}

MoeShape layer_shape() {
  MoeShape s;
  s.n_embd = kH;
  s.n_expert = kE;
  s.n_expert_used = 2;
  s.n_ff_expert = kI;
  return s;
}

const char* at(const void* base, size_t offset) { return static_cast<const char*>(base) + offset; }

TEST(MoePackedLoad, SwitchMlpExpertsAreViewsOfTheirOwnSlices) {
  test::TempDir dir;
  WeightStore store = open_layer(dir, stacked_layer());
  const MoeWeights w = moe_take_weights(store, kLayer, layer_shape());
  store.audit();  // codes, scales and biases all taken
  EXPECT_EQ(w.layout, "switch_mlp");
  EXPECT_EQ(w.router.describe(), "[3, 64] affine 8-bit g32");
  const auto expect_expert = [&](const Tensor& t, const std::string& module, int64_t e,
                                 const std::string& describe) {
    SCOPED_TRACE(module + " expert " + std::to_string(e));
    const TensorInfo* codes = store.find(module + ".weight");
    const TensorInfo* scales = store.find(module + ".scales");
    const TensorInfo* biases = store.find(module + ".biases");
    EXPECT_EQ(t.describe(), describe);
    EXPECT_EQ(t.packed.param_dtype, DType::BF16);
    EXPECT_EQ(t.data, at(codes->data, size_t(e) * codes->nbytes / kE));
    EXPECT_EQ(t.packed.scales, at(scales->data, size_t(e) * scales->nbytes / kE));
    EXPECT_EQ(t.packed.biases, at(biases->data, size_t(e) * biases->nbytes / kE));
    EXPECT_EQ(t.stored_bytes(), (codes->nbytes + scales->nbytes + biases->nbytes) / kE);
  };
  for (int64_t e = 0; e < kE; ++e) {
    expect_expert(w.gate[size_t(e)], kLayer + "switch_mlp.gate_proj", e,
                  "[32, 64] affine 4-bit g32");
    expect_expert(w.up[size_t(e)], kLayer + "switch_mlp.up_proj", e, "[32, 64] affine 4-bit g32");
    expect_expert(w.down[size_t(e)], kLayer + "switch_mlp.down_proj", e,
                  "[64, 32] affine 8-bit g32");
  }
}

// Loading the layer with tensor `name` replaced by `bad` fails with a message naming it.
void expect_error_naming(const std::string& name, const StTensor& bad,
                         std::initializer_list<const char*> more = {}) {
  SCOPED_TRACE(name);
  std::vector<StTensor> tensors = stacked_layer();
  for (auto& t : tensors)
    if (t.name == name) t = bad;
  test::TempDir dir;
  WeightStore store = open_layer(dir, tensors);
  const std::string message = error_of([&] { moe_take_weights(store, kLayer, layer_shape()); });
  EXPECT_THAT(message, HasSubstr(name));
  for (const char* m : more) EXPECT_THAT(message, HasSubstr(m));
}

TEST(MoePackedLoad, BadStackedShapesNameTheTensor) {
  const std::string up = kLayer + "switch_mlp.up_proj", down = kLayer + "switch_mlp.down_proj";
  // Scales of three groups per row where the input size gives two.
  expect_error_naming(up + ".scales",
                      {up + ".scales", "BF16", {kE, kI, 3}, pattern(kE * kI * 6, 1)},
                      {"[3, 32, 2]"});
  // Codes of 4 bits where config.json says 8 for the down projections.
  expect_error_naming(
      down + ".weight",
      {down + ".weight", "U32", {kE, kH, kI * 4 / 32}, pattern(kE * kH * kI / 2, 2)},
      {"8-bit affine"});
  // One expert too many, and the expert dimension missing.
  expect_error_naming(
      up + ".weight",
      {up + ".weight", "U32", {kE + 1, kI, kH * 4 / 32}, pattern((kE + 1) * kI * kH / 2, 3)});
  expect_error_naming(
      up + ".weight",
      {up + ".weight", "U32", {kE * kI, kH * 4 / 32}, pattern(kE * kI * kH / 2, 4)});
  // Biases missing from a stacked affine module.
  std::vector<StTensor> tensors = stacked_layer();
  std::erase_if(tensors, [&](const StTensor& t) { return t.name == up + ".biases"; });
  test::TempDir dir;
  WeightStore store = open_layer(dir, tensors);
  EXPECT_THAT(error_of([&] { moe_take_weights(store, kLayer, layer_shape()); }),
              HasSubstr(up + ".biases is missing"));
}

}  // namespace
}  // namespace hearth
