// ModelInfo::decode_bytes and active_params — what `hearth bench` divides by for its achieved
// GB/s and FLOP/s — against an independent count over the fixture checkpoints' safetensors
// headers: every tensor the text model uses, less the embedding table when the head is untied,
// less the share of expert weights a token is not routed to.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "fixture.h"
#include "models/model.h"

namespace hearth {
namespace {

struct Count {
  double bytes = 0, params = 0;
};

// Sums the checkpoint's tensors by name: `embed` the embedding table, `experts` the routed
// experts, `all` every text-model tensor (vision towers excluded).
struct HeaderCounts {
  Count all, embed, experts;
};

HeaderCounts count_header(const std::string& dir) {
  std::ifstream in(dir + "/model.safetensors", std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string text(n, '\0');
  in.read(text.data(), std::streamsize(n));
  const auto header = nlohmann::json::parse(text);
  HeaderCounts c;
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__" || name.find("visual.") != std::string::npos) continue;
    const auto off = t["data_offsets"];
    const double bytes = double(off[1].get<uint64_t>() - off[0].get<uint64_t>());
    const double params = bytes / (t["dtype"].get<std::string>() == "F32" ? 4.0 : 2.0);
    auto add = [&](Count& x) {
      x.bytes += bytes;
      x.params += params;
    };
    add(c.all);
    if (name.find("embed_tokens.weight") != std::string::npos) add(c.embed);
    if (name.find(".experts.") != std::string::npos) add(c.experts);
  }
  return c;
}

void expect_decode_work(const std::string& case_name, bool untied, double active_expert_share) {
  const std::string dir = test::fixture_root() + "/" + case_name;
  auto model = load_model(dir);
  const HeaderCounts h = count_header(dir);
  const double inactive = 1.0 - active_expert_share;
  const double bytes = h.all.bytes - (untied ? h.embed.bytes : 0.0) - inactive * h.experts.bytes;
  const double params =
      h.all.params - (untied ? h.embed.params : 0.0) - inactive * h.experts.params;
  EXPECT_EQ(double(model->info().decode_bytes), bytes) << case_name;
  EXPECT_EQ(double(model->info().active_params), params) << case_name;
  EXPECT_EQ(model->info().head_params, model->info().n_vocab * model->info().n_embd) << case_name;
  EXPECT_LT(model->info().decode_bytes, model->info().weight_bytes + (untied ? 0u : 1u))
      << case_name;
}

TEST(DecodeWork, TiedDenseModelReadsEveryWeight) { expect_decode_work("llama_tied", false, 1.0); }

TEST(DecodeWork, UntiedDenseModelSkipsTheEmbeddingTable) { expect_decode_work("llama", true, 1.0); }

TEST(DecodeWork, MoeModelsCountOnlyTheRoutedExperts) {
  expect_decode_work("qwen3_moe", true, 2.0 / 8.0);    // 8 experts, top-2
  expect_decode_work("qwen3_5_moe", true, 2.0 / 8.0);  // 8 experts, top-2; vision tower ignored
}

}  // namespace
}  // namespace hearth
