// `hearth quantize` and MoE experts: they are written stacked in mlx-lm's switch_mlp layout, from
// per-expert tensors and from transformers 5's fused gate_up_proj / down_proj, in the affine and
// trellis formats alike. A stack must hold exactly the bytes the same experts get when written
// per expert (expert after expert, gate rows before up rows), with config.json's entries and
// --module-bits keyed on the stacked module; experts that cannot be stacked keep their names with
// a notice, and two layouts of the same experts are an error naming both.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "core/error.h"
#include "loader/weight_store.h"
#include "loader_test_util.h"
#include "models/moe.h"
#include "quant/quantize_checkpoint.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::make_safetensors;
using test::StTensor;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

constexpr int64_t kExperts = 2, kHidden = 256, kInter = 256;
const std::string kLayer = "model.layers.0.mlp.";

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16(normal(rng));
  return v;
}

std::string expert_bytes(int64_t e, const std::string& projection) {
  const uint32_t seed = uint32_t(e * 3 + (projection == "gate" ? 0 : projection == "up" ? 1 : 2));
  return test::raw(random_bf16(size_t(kHidden * kInter), seed));
}

// A MoE layer's experts, per expert (`fused` false) or as transformers 5 stores them, plus the
// router; the same values either way.
void write_moe_checkpoint(const fs::path& dir, bool fused, std::vector<StTensor> extra = {}) {
  std::vector<StTensor> t = {{kLayer + "gate.weight",
                              "BF16",
                              {kExperts, kHidden},
                              test::raw(random_bf16(size_t(kExperts * kHidden), 99))}};
  if (fused) {
    std::string gate_up, down;
    for (int64_t e = 0; e < kExperts; ++e) {
      gate_up += expert_bytes(e, "gate") + expert_bytes(e, "up");
      down += expert_bytes(e, "down");
    }
    t.push_back(
        {kLayer + "experts.gate_up_proj", "BF16", {kExperts, 2 * kInter, kHidden}, gate_up});
    t.push_back({kLayer + "experts.down_proj", "BF16", {kExperts, kHidden, kInter}, down});
  } else {
    for (int64_t e = 0; e < kExperts; ++e)
      for (const char* p : {"gate", "up", "down"})
        t.push_back({kLayer + "experts." + std::to_string(e) + "." + p + "_proj.weight",
                     "BF16",
                     {std::string(p) == "down" ? kHidden : kInter,
                      std::string(p) == "down" ? kInter : kHidden},
                     expert_bytes(e, p)});
  }
  t.insert(t.end(), extra.begin(), extra.end());
  fs::create_directories(dir);
  write_bytes(dir / "model.safetensors", make_safetensors(t, {{"format", "pt"}}));
  write_bytes(dir / "config.json", R"({"model_type": "qwen3_moe", "hidden_size": 256})");
}

quant::QuantizeOptions options(const std::string& format, bool stack) {
  quant::QuantizeOptions o;
  o.spec.format = format;
  o.spec.params = format == "trellis" ? quant::QuantParams{2, 256} : quant::QuantParams{4, 64};
  o.spec.stack_experts = stack;
  o.n_threads = 1;
  return o;
}

std::string bytes_of(const TensorInfo& t) {
  return std::string(static_cast<const char*>(t.data), t.nbytes);
}

// Every stacked tensor of `stacked` is the per-expert tensors of `per_expert` one after another.
void expect_stacks_hold_the_per_expert_bytes(const WeightStore& stacked,
                                             const WeightStore& per_expert,
                                             const std::vector<std::string>& parts) {
  for (const char* p : {"gate", "up", "down"}) {
    for (const auto& part : parts) {
      const std::string name = kLayer + "switch_mlp." + p + "_proj." + part;
      const TensorInfo* s = stacked.find(name);
      ASSERT_TRUE(s) << name;
      std::string want;
      for (int64_t e = 0; e < kExperts; ++e) {
        const TensorInfo* one =
            per_expert.find(kLayer + "experts." + std::to_string(e) + "." + p + "_proj." + part);
        ASSERT_TRUE(one);
        EXPECT_EQ(s->dtype, one->dtype);
        std::vector<int64_t> shape = one->shape;
        shape.insert(shape.begin(), kExperts);
        EXPECT_EQ(s->shape, shape) << name;
        want += bytes_of(*one);
      }
      EXPECT_TRUE(bytes_of(*s) == want) << name << " differs from its experts' bytes";
    }
  }
}

TEST(QuantizeMoe, AffineStacksHoldThePerExpertCodesFromEitherInputLayout) {
  TempDir dir;
  write_moe_checkpoint(dir / "in", false);
  write_moe_checkpoint(dir / "fused", true);
  quant::quantize_checkpoint(dir / "in", dir / "per_expert", options("affine", false));
  quant::quantize_checkpoint(dir / "in", dir / "stacked", options("affine", true));
  quant::quantize_checkpoint(dir / "fused", dir / "from_fused", options("affine", true));
  const auto per_expert = WeightStore::open(dir / "per_expert");
  for (const char* out : {"stacked", "from_fused"}) {
    SCOPED_TRACE(out);
    const auto stacked = WeightStore::open(dir / out);
    EXPECT_EQ(stacked.size(), 3u * 3u + 3u);  // 3 stacks and the router, each codes + 2
    expect_stacks_hold_the_per_expert_bytes(stacked, per_expert, {"weight", "scales", "biases"});
    const auto config = nlohmann::json::parse(test::read_bytes(dir / out / "config.json"));
    EXPECT_EQ(config["quantization"].dump(), R"({"bits":4,"group_size":64,"mode":"affine"})");
  }
}

TEST(QuantizeMoe, TrellisStacksLoadAsExpertsWithTheirOwnCodes) {
  TempDir dir;
  write_moe_checkpoint(dir / "in", false);
  quant::quantize_checkpoint(dir / "in", dir / "per_expert", options("trellis", false));
  quant::quantize_checkpoint(dir / "in", dir / "stacked", options("trellis", true));
  const auto per_expert = WeightStore::open(dir / "per_expert");
  auto stacked = WeightStore::open(dir / "stacked");
  expect_stacks_hold_the_per_expert_bytes(stacked, per_expert, {"weight", "scales"});
  // The down projections are coded along their output dim (stored transposed), stacked too.
  const auto config = nlohmann::json::parse(test::read_bytes(dir / "stacked" / "config.json"));
  const auto& q = config["quantization"];
  EXPECT_EQ(q[kLayer + "switch_mlp.down_proj"]["trellis"]["axis"], 0);
  EXPECT_FALSE(q.contains(kLayer + "switch_mlp.gate_proj"));  // the defaults: axis 1
  EXPECT_EQ(stacked.find(kLayer + "switch_mlp.down_proj.weight")->shape,
            (std::vector<int64_t>{kExperts, kInter, kHidden * 2 / 32}));

  // The loader gives each expert a 2-D view of its own codes and scales.
  stacked.set_quantization(QuantizationConfig::from_json(config, "config.json"));
  MoeShape shape;
  shape.n_embd = kHidden;
  shape.n_expert = kExperts;
  shape.n_expert_used = 1;
  shape.n_ff_expert = kInter;
  const MoeWeights w = moe_take_weights(stacked, kLayer, shape);
  stacked.audit();
  EXPECT_EQ(w.layout, "switch_mlp");
  for (int64_t e = 0; e < kExperts; ++e) {
    const std::string one = kLayer + "experts." + std::to_string(e) + ".";
    const Tensor& down = w.down[size_t(e)];
    EXPECT_EQ(down.describe(), "[256, 256] trellis 2-bit (transposed)");
    EXPECT_EQ(std::string(static_cast<const char*>(down.data), down.nbytes()),
              bytes_of(*per_expert.find(one + "down_proj.weight")));
    EXPECT_EQ(std::memcmp(down.packed.scales, per_expert.find(one + "down_proj.scales")->data,
                          size_t(kInter) * 2),
              0);
    const Tensor& up = w.up[size_t(e)];
    EXPECT_EQ(up.describe(), "[256, 256] trellis 2-bit");
    EXPECT_EQ(std::string(static_cast<const char*>(up.data), up.nbytes()),
              bytes_of(*per_expert.find(one + "up_proj.weight")));
  }
}

std::map<std::string, int> planned_bits(const quant::QuantizePlan& plan) {
  std::map<std::string, int> bits;
  for (const auto& t : plan.tensors)
    if (t.quantized()) bits[t.module] = t.params.bits;
  return bits;
}

TEST(QuantizeMoe, ModuleBitsAddressTheStacksAndPerExpertNamesPointThere) {
  TempDir dir;
  write_moe_checkpoint(dir / "in", false);
  const auto store = WeightStore::open(dir / "in");
  quant::QuantizeSpec spec = options("affine", true).spec;
  spec.overrides = quant::parse_module_bits("mlp.switch_mlp.down_proj=8,switch_mlp.up_proj=false");
  const auto plan = quant::quantize_plan(store, spec);
  EXPECT_EQ(planned_bits(plan), (std::map<std::string, int>{{kLayer + "gate", 4},
                                                            {kLayer + "switch_mlp.down_proj", 8},
                                                            {kLayer + "switch_mlp.gate_proj", 4}}));
  EXPECT_EQ(plan.quantization[kLayer + "switch_mlp.down_proj"].dump(),
            R"({"group_size":64,"bits":8,"mode":"affine"})");
  EXPECT_EQ(plan.quantization[kLayer + "switch_mlp.up_proj"], false);
  EXPECT_EQ(plan.n_quantized, 3);
  EXPECT_EQ(plan.quantized_params, kExperts * (2 * kHidden * kInter) + kExperts * kHidden);
  // The float stack is one [E, I, H] tensor made of the experts' bytes.
  for (const auto& t : plan.tensors) {
    if (!t.quantized() && t.parts.size() > 1) {
      EXPECT_EQ(t.outputs.at(0).shape, (std::vector<int64_t>{kExperts, kInter, kHidden}));
    }
  }
  spec.overrides = quant::parse_module_bits("experts.0.down_proj=8");
  EXPECT_THAT(error_of([&] { quant::quantize_plan(store, spec); }),
              HasSubstr("MoE experts are written stacked: name them as mlp.switch_mlp."));
  // Without stacking, per-expert names are modules as before.
  spec.stack_experts = false;
  EXPECT_EQ(planned_bits(quant::quantize_plan(store, spec))[kLayer + "experts.0.down_proj"], 8);
}

TEST(QuantizeMoe, IncompleteExpertsKeepTheirNamesAndTwoLayoutsAreAnError) {
  TempDir dir;
  // Expert 3 of up_proj only: experts 0..2 are missing, so up_proj stays per expert.
  write_moe_checkpoint(
      dir / "gap", false,
      {{kLayer + "experts.3.up_proj.weight", "BF16", {kInter, kHidden}, expert_bytes(3, "up")}});
  const auto gap = WeightStore::open(dir / "gap");
  const auto plan = quant::quantize_plan(gap, options("affine", true).spec);
  EXPECT_THAT(plan.notices,
              ::testing::Contains(kLayer + "experts.*.up_proj stays per expert, not stacked into " +
                                  kLayer + "switch_mlp.up_proj: expert 2 is missing"));
  const auto bits = planned_bits(plan);
  EXPECT_TRUE(bits.count(kLayer + "experts.3.up_proj"));
  EXPECT_TRUE(bits.count(kLayer + "switch_mlp.gate_proj"));

  write_moe_checkpoint(dir / "twice", true,
                       {{kLayer + "experts.0.gate_proj.weight",
                         "BF16",
                         {kInter, kHidden},
                         expert_bytes(0, "gate")}});
  const auto twice = WeightStore::open(dir / "twice");
  EXPECT_THAT(error_of([&] { quant::quantize_plan(twice, options("affine", true).spec); }),
              HasSubstr("would both become " + kLayer + "switch_mlp.gate_proj"));
}

}  // namespace
}  // namespace hearth
