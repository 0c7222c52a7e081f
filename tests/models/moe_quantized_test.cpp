// Quantized MoE checkpoints in mlx-lm's stacked switch_mlp layout run as the per-expert ones: each
// MoE fixture is quantized by `hearth quantize` (affine) with its experts stacked — from its
// per-expert tensors and from a fused copy — and with per-expert names; all three must load and
// give bit-identical logits (the same codes, only laid out differently). Per-module overrides
// (the router at 8 bits, as mlx-community's MoE checkpoints have it, and up_proj at 8) must reach
// the stacked modules through config.json.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "fixture.h"
#include "loader/weight_store.h"
#include "models/model.h"
#include "moe_restack.h"
#include "quant/quantize_checkpoint.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

std::vector<float> prefill_logits(const fs::path& dir, const std::vector<int32_t>& prompt) {
  auto model = load_model(dir);
  auto state = model->new_sequence();
  std::vector<float> logits(prompt.size() * size_t(model->info().n_vocab));
  model->forward(*state, prompt, LogitsRows::All, logits.data());
  return logits;
}

quant::QuantizeOptions affine_options(bool stack_experts) {
  quant::QuantizeOptions o;
  o.spec.params = {4, 32};
  o.spec.stack_experts = stack_experts;
  o.spec.overrides = quant::parse_module_bits("mlp.gate=8,up_proj=8");
  o.n_threads = 1;
  return o;
}

// The name in `store` ending with `suffix` ("layers.0.mlp.switch_mlp.up_proj.weight"), whatever
// the text model's prefix; empty if none.
std::string name_ending(const WeightStore& store, const std::string& suffix) {
  for (const auto& name : store.names())
    if (name.ends_with("." + suffix)) return name;
  return "";
}

class MoeQuantized : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeQuantized, SwitchMlpOutputGivesThePerExpertLogits) {
  const fs::path src = test::fixture_root() + "/" + GetParam();
  std::vector<int32_t> prompt;
  for (const auto& fc : test::fixture_cases({}))
    if (fc.name == GetParam()) prompt = fc.reference["prompt"].get<std::vector<int32_t>>();
  ASSERT_FALSE(prompt.empty());
  const fs::path root = fs::temp_directory_path() /
                        ("hearth_moe_quantized_" + GetParam() + "_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  quant::quantize_checkpoint(src, root / "per_expert", affine_options(false));
  quant::quantize_checkpoint(src, root / "switch_mlp", affine_options(true));
  test::moe_restack(src, root / "fused_input", "fused");
  quant::quantize_checkpoint(root / "fused_input", root / "from_fused", affine_options(true));

  // No per-expert tensor is left. gate and up are packed [E, I, H·bits/32]; down ([H, I] with
  // I = 16, below the group) stays float, stacked, and config.json says so by its mlx-lm path.
  const WeightStore store = WeightStore::open(root / "switch_mlp");
  for (const auto& name : store.names()) EXPECT_EQ(name.find(".experts."), std::string::npos);
  const std::string up = name_ending(store, "layers.0.mlp.switch_mlp.up_proj.weight");
  const std::string gate = name_ending(store, "layers.0.mlp.switch_mlp.gate_proj.weight");
  const std::string down = name_ending(store, "layers.0.mlp.switch_mlp.down_proj.weight");
  ASSERT_FALSE(up.empty() || gate.empty() || down.empty());
  EXPECT_EQ(store.find(up)->shape, (std::vector<int64_t>{8, 16, 64 * 8 / 32}));
  EXPECT_EQ(store.find(gate)->shape, (std::vector<int64_t>{8, 16, 64 * 4 / 32}));
  EXPECT_EQ(store.find(gate.substr(0, gate.size() - 7) + ".scales")->shape,
            (std::vector<int64_t>{8, 16, 2}));
  EXPECT_EQ(store.find(down)->dtype, DType::BF16);
  EXPECT_EQ(store.find(down)->shape, (std::vector<int64_t>{8, 64, 16}));
  const auto config = nlohmann::json::parse(std::ifstream(root / "switch_mlp" / "config.json"));
  const auto& q = config["quantization"];
  const std::string layer = up.substr(0, up.find("switch_mlp."));  // "....layers.0.mlp."
  EXPECT_EQ(q[layer + "switch_mlp.down_proj"], false);
  EXPECT_EQ(q[layer + "switch_mlp.up_proj"]["bits"], 8);
  EXPECT_EQ(q[layer + "gate"]["bits"], 8);

  const auto want = prefill_logits(root / "per_expert", prompt);
  EXPECT_EQ(prefill_logits(root / "switch_mlp", prompt), want) << "stacked from per-expert";
  EXPECT_EQ(prefill_logits(root / "from_fused", prompt), want) << "stacked from fused";
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeQuantized,
                         ::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"));

}  // namespace
}  // namespace hearth
