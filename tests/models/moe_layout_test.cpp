// The three expert layouts load to the same model: the per-expert MoE fixtures are rewritten with
// their experts stacked — fused gate_up_proj [E, 2I, H] + down_proj [E, H, I] (transformers'
// in-memory form) and MLX's switch_mlp.{gate,up,down}_proj [E, I, H] / [E, H, I] — in a temp dir,
// and must give bit-identical logits (the same matrices, only viewed differently).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "fixture.h"
#include "loader/weight_store.h"
#include "models/model.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

struct OutTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

void write_safetensors(const fs::path& file, const std::map<std::string, OutTensor>& tensors) {
  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", t.dtype},
                    {"shape", t.shape},
                    {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(file, std::ios::binary);
  const uint64_t n = h.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << h;
  for (const auto& [name, t] : tensors) out << t.bytes;
}

// Copies fixture `src` to `dst` with every layer's per-expert tensors stacked as `layout`.
void restack(const std::string& src, const fs::path& dst, const std::string& layout) {
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const char* f : {"config.json", "generation_config.json"})
    if (fs::exists(fs::path(src) / f)) fs::copy(fs::path(src) / f, dst / f);
  WeightStore store = WeightStore::open(src);
  std::map<std::string, OutTensor> out;
  // prefix ("...mlp.") → expert → proj → bytes
  std::map<std::string, std::map<int, std::map<std::string, const TensorInfo*>>> experts;
  const std::regex expert_re(R"((.*\.mlp\.)experts\.(\d+)\.(gate|up|down)_proj\.weight)");
  for (const auto& name : store.names()) {
    const TensorInfo* info = store.find(name);
    std::smatch m;
    if (std::regex_match(name, m, expert_re)) {
      experts[m[1]][std::stoi(m[2])][m[3]] = info;
      continue;
    }
    out[name] = {std::string(dtype_name(info->dtype)), info->shape,
                 std::string(static_cast<const char*>(info->data), info->nbytes)};
  }
  for (const auto& [prefix, by_expert] : experts) {
    const int64_t E = int64_t(by_expert.size());
    const auto* g0 = by_expert.at(0).at("gate");
    const int64_t I = g0->shape[0], H = g0->shape[1];
    const std::string dt(dtype_name(g0->dtype));
    auto cat = [&](std::initializer_list<const char*> projs) {
      std::string b;
      for (const auto& [e, p] : by_expert)
        for (const char* proj : projs)
          b.append(static_cast<const char*>(p.at(proj)->data), p.at(proj)->nbytes);
      return b;
    };
    if (layout == "fused") {
      out[prefix + "experts.gate_up_proj"] = {dt, {E, 2 * I, H}, cat({"gate", "up"})};
      out[prefix + "experts.down_proj"] = {dt, {E, H, I}, cat({"down"})};
    } else {
      out[prefix + "switch_mlp.gate_proj.weight"] = {dt, {E, I, H}, cat({"gate"})};
      out[prefix + "switch_mlp.up_proj.weight"] = {dt, {E, I, H}, cat({"up"})};
      out[prefix + "switch_mlp.down_proj.weight"] = {dt, {E, H, I}, cat({"down"})};
    }
  }
  write_safetensors(dst / "model.safetensors", out);
}

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
    restack(src, dir, layout);
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
