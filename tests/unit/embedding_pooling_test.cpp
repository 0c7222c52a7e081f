// Pooling of hidden states into embeddings, and the sentence-transformers files that choose it.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "loader_test_util.h"
#include "runtime/embedding.h"

namespace hearth {
namespace {

// Three tokens, four dimensions.
const std::vector<float> kHidden = {1,  2, 3,  4,  //
                                    5,  0, -1, 2,  //
                                    -3, 4, 1,  0};

std::vector<float> pooled(Pooling p, bool normalize = false) {
  EmbeddingConfig c;
  c.pooling = p;
  c.normalize = normalize;
  return pool_hidden_states(kHidden, 3, 4, c);
}

TEST(EmbeddingPooling, EachModeOverTheTokens) {
  EXPECT_EQ(pooled(Pooling::LastToken), (std::vector<float>{-3, 4, 1, 0}));
  EXPECT_EQ(pooled(Pooling::First), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(pooled(Pooling::Max), (std::vector<float>{5, 4, 3, 4}));
  EXPECT_EQ(pooled(Pooling::Mean), (std::vector<float>{1, 2, 1, 2}));
  const auto s = pooled(Pooling::MeanSqrtLen);
  EXPECT_FLOAT_EQ(s[0], float(3 / std::sqrt(3.0)));
  EXPECT_FLOAT_EQ(s[2], float(3 / std::sqrt(3.0)));
}

TEST(EmbeddingPooling, NormalisedToUnitLengthAndTruncatedWithRenormalisation) {
  auto v = pooled(Pooling::LastToken, true);  // (-3, 4, 1, 0) / sqrt(26)
  EXPECT_FLOAT_EQ(v[1], float(4 / std::sqrt(26.0)));
  truncate_embedding(v, 2, true);  // (-3, 4) / 5
  ASSERT_EQ(v.size(), 2u);
  EXPECT_FLOAT_EQ(v[0], -0.6f);
  EXPECT_FLOAT_EQ(v[1], 0.8f);
  EXPECT_THROW(truncate_embedding(v, 3, true), Error);
  EXPECT_THROW(truncate_embedding(v, 0, true), Error);
  // A zero vector stays zero rather than dividing by zero.
  EmbeddingConfig c;
  const std::vector<float> zeros(8, 0.0f);
  for (float x : pool_hidden_states(zeros, 2, 4, c)) EXPECT_EQ(x, 0.0f);
  EXPECT_THROW(pool_hidden_states(zeros, 3, 4, c), Error);
}

void write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

const char* kModules = R"([
  {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
  {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
  {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
])";

TEST(EmbeddingConfig, ReadsSentenceTransformersPoolingAndNormalize) {
  test::TempDir dir;
  EmbeddingConfig none = EmbeddingConfig::load(dir.path());
  EXPECT_FALSE(none.from_sentence_transformers);
  EXPECT_EQ(none.pooling, Pooling::Mean);
  EXPECT_TRUE(none.normalize);

  write(dir / "modules.json", kModules);
  write(dir / "1_Pooling/config.json",
        R"({"word_embedding_dimension": 4, "pooling_mode_cls_token": false,
            "pooling_mode_mean_tokens": false, "pooling_mode_lasttoken": true,
            "include_prompt": true})");
  EmbeddingConfig qwen = EmbeddingConfig::load(dir.path());
  EXPECT_TRUE(qwen.from_sentence_transformers);
  EXPECT_EQ(qwen.pooling, Pooling::LastToken);
  EXPECT_TRUE(qwen.normalize);

  // Without a Normalize module the vectors are left as pooled.
  write(dir / "modules.json",
        R"([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])");
  EXPECT_FALSE(EmbeddingConfig::load(dir.path()).normalize);
}

TEST(EmbeddingConfig, ConfigurationsItCannotFollowAreErrorsNamingTheFile) {
  test::TempDir dir;
  auto error_of = [&] {
    try {
      EmbeddingConfig::load(dir.path());
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  write(dir / "modules.json", kModules);
  write(dir / "1_Pooling/config.json", R"({"pooling_mode_weightedmean_tokens": true})");
  EXPECT_NE(error_of().find("weighted-mean"), std::string::npos);
  write(dir / "1_Pooling/config.json",
        R"({"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true})");
  EXPECT_NE(error_of().find("exactly one pooling mode"), std::string::npos);
  write(dir / "1_Pooling/config.json",
        R"({"pooling_mode_mean_tokens": true, "include_prompt": false})");
  EXPECT_NE(error_of().find("include_prompt"), std::string::npos);
  write(dir / "1_Pooling/config.json", "{not json");
  EXPECT_NE(error_of().find("not valid JSON"), std::string::npos);
  write(dir / "modules.json",
        R"([{"path": "../../etc", "type": "sentence_transformers.models.Pooling"}])");
  EXPECT_NE(error_of().find("leaves the model directory"), std::string::npos);
  write(dir / "modules.json",
        R"([{"path": "2_Dense", "type": "sentence_transformers.models.Dense"}])");
  EXPECT_NE(error_of().find("Dense"), std::string::npos);
  write(dir / "modules.json", R"({"not": "a list"})");
  EXPECT_NE(error_of().find("list of modules"), std::string::npos);
}

}  // namespace
}  // namespace hearth
