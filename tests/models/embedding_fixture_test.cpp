// Embeddings against transformers: tools/fixtures/make_embedding_fixtures.py saved the qwen3
// fixture as a bare Qwen3-Embedding-style checkpoint with sentence-transformers' pooling files
// (last token, normalised) and recorded what transformers (float32) and sentence-transformers'
// pooling rules give for a few inputs; the llama fixture, which has no pooling files, gets
// hearth's default (mean over the tokens, normalised). On a GPU (bf16 activations) the bound is
// the CUDA fixtures' 5e-2 of the entries' spread (unit vectors of 64 entries: 1/8).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fixture.h"
#include "loader/npy.h"
#include "runtime/engine.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace hearth {
namespace {

// Rows of `expected` [n_inputs, hidden] against the engine's embeddings of the fixture's inputs.
void expect_embeddings(const std::string& model_dir, const std::string& npy, const char* what,
                       const std::string& device = "cpu", double bound = 1e-4) {
  const std::string fixture = test::fixture_root() + "/qwen3_embedding";
  std::ifstream in(fixture + "/reference.json");
  ASSERT_TRUE(in) << fixture << "/reference.json";
  const auto ref = nlohmann::json::parse(in);
  const NpyArray expected = npy_read(fixture + "/" + npy);
  ASSERT_EQ(expected.shape.size(), 2u);
  const auto inputs = ref["inputs"].get<std::vector<std::vector<int32_t>>>();
  ASSERT_EQ(expected.shape[0], int64_t(inputs.size()));
  EngineOptions eo;
  eo.model_dir = model_dir;
  eo.device = device;
  auto engine = Engine::load(eo);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<float> got = engine->embed(inputs[i]);
    ASSERT_EQ(int64_t(got.size()), expected.shape[1]) << what << " input " << i;
    double worst = 0, norm = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      const double want = expected.f32[i * got.size() + j];
      worst = std::max(worst, std::abs(double(got[j]) - want));
      norm += double(got[j]) * got[j];
    }
    EXPECT_LT(worst, bound) << device << ": " << what << " input " << i << " (" << inputs[i].size()
                            << " tokens)";
    EXPECT_NEAR(norm, 1.0, 1e-5) << device << ": " << what << " input " << i;
  }
}

TEST(EmbeddingFixture, LastTokenPoolingFromSentenceTransformersFilesMatchesTransformers) {
  expect_embeddings(test::fixture_root() + "/qwen3_embedding", "embeddings.npy", "qwen3_embedding");
}

TEST(EmbeddingFixture, DefaultMeanPoolingMatchesTransformers) {
  expect_embeddings(test::fixture_root() + "/llama", "mean_embeddings.npy", "llama, mean");
}

#ifdef HEARTH_HAVE_CUDA
TEST(EmbeddingFixture, OnCudaMatchTransformers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const double bound = 5e-2 / 8;
  expect_embeddings(test::fixture_root() + "/qwen3_embedding", "embeddings.npy", "qwen3_embedding",
                    "cuda", bound);
  expect_embeddings(test::fixture_root() + "/llama", "mean_embeddings.npy", "llama, mean", "cuda",
                    bound);
}
#endif

}  // namespace
}  // namespace hearth
