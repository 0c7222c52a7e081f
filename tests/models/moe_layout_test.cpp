// The three expert layouts load to the same model: the per-expert MoE fixtures are rewritten with
// their experts stacked — fused gate_up_proj [E, 2I, H] + down_proj [E, H, I] (transformers'
// in-memory form) and MLX's switch_mlp.{gate,up,down}_proj [E, I, H] / [E, H, I] — in a temp dir,
// and must give bit-identical logits (the same matrices, only viewed differently).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "fixture.h"
#include "models/model.h"
#include "moe_restack.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

class MoeLayouts : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeLayouts, StackedExpertsGiveIdenticalLogits) {
  const std::string src = test::fixture_root() + "/" + GetParam();
  auto c = test::fixture_cases({});
  std::vector<int32_t> prompt;
  for (const auto& fc : c)
    if (fc.name == GetParam()) prompt = fc.reference["prompt"].get<std::vector<int32_t>>();
  ASSERT_FALSE(prompt.empty());
  auto base = load_model(src);
  auto sb = base->new_sequence();
  std::vector<float> want(prompt.size() * size_t(base->info().n_vocab));
  base->forward(*sb, prompt, LogitsRows::All, want.data());
  for (const std::string layout : {"fused", "switch_mlp"}) {
    const fs::path dir = fs::temp_directory_path() / ("hearth_moe_" + GetParam() + "_" + layout +
                                                      "_" + std::to_string(::getpid()));
    test::moe_restack(src, dir, layout);
    auto model = load_model(dir);
    auto s = model->new_sequence();
    std::vector<float> got(want.size());
    model->forward(*s, prompt, LogitsRows::All, got.data());
    EXPECT_EQ(got, want) << GetParam() << " " << layout;
    fs::remove_all(dir);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeLayouts,
                         ::testing::Values("qwen3_moe", "qwen3_next", "qwen3_5_moe"));

}  // namespace
}  // namespace hearth
