// ModelConfig: text_config selection and merging, typed accessors and their errors, eos ids.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "loader/config.h"
#include "loader_test_util.h"

namespace hearth {
namespace {

using test::error_of;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

TEST(ModelConfig, PlainConfigAccessors) {
  TempDir dir;
  write_bytes(dir / "config.json", R"({
    "model_type": "llama", "hidden_size": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000,
    "max_position_embeddings": 131072.0, "tie_word_embeddings": false, "hidden_act": "silu",
    "rope_scaling": null, "eos_token_id": 2, "bos_token_id": 1})");
  auto c = ModelConfig::load(dir.path());
  EXPECT_EQ(c.model_type(), "llama");
  EXPECT_EQ(c.wrapper_model_type(), "llama");
  EXPECT_FALSE(c.is_wrapped());
  EXPECT_EQ(c.get_int("hidden_size"), 64);
  EXPECT_EQ(c.get_int("max_position_embeddings"), 131072);  // integral float accepted
  EXPECT_DOUBLE_EQ(c.get_float("rms_norm_eps"), 1e-5);
  EXPECT_DOUBLE_EQ(c.get_float("rope_theta"), 10000.0);  // int accepted as float
  EXPECT_FALSE(c.get_bool("tie_word_embeddings"));
  EXPECT_EQ(c.get_string("hidden_act"), "silu");
  EXPECT_TRUE(c.has("hidden_size"));
  EXPECT_FALSE(c.has("rope_scaling"));  // null counts as absent
  EXPECT_FALSE(c.has("nope"));
  EXPECT_EQ(c.get_int_or("num_key_value_heads", 8), 8);
  EXPECT_EQ(c.get_int_or("hidden_size", 8), 64);
  EXPECT_DOUBLE_EQ(c.get_float_or("rope_scaling", 2.5), 2.5);
  EXPECT_TRUE(c.get_bool_or("attention_bias", true));
  EXPECT_EQ(c.get_string_or("hidden_act", "gelu"), "silu");
  EXPECT_EQ(c.get_string_or("act", "gelu"), "gelu");
  EXPECT_TRUE(c.generation().is_object());
  EXPECT_TRUE(c.generation().empty());
  EXPECT_EQ(c.eos_token_ids(), (std::vector<int64_t>{2}));
  EXPECT_EQ(c.raw()["bos_token_id"], 1);

  const std::string file = (dir / "config.json").string();
  std::string msg = error_of([&] { c.get_int("num_hidden_layers"); });
  EXPECT_THAT(msg, HasSubstr(file));
  EXPECT_THAT(msg, HasSubstr("num_hidden_layers"));
  msg = error_of([&] { c.get_int("rms_norm_eps"); });
  EXPECT_THAT(msg, HasSubstr("rms_norm_eps"));
  EXPECT_THAT(msg, HasSubstr("integer"));
  EXPECT_THAT(error_of([&] { c.get_string("hidden_size"); }), HasSubstr("hidden_size"));
  EXPECT_THAT(error_of([&] { c.get_bool("hidden_act"); }), HasSubstr("hidden_act"));
  EXPECT_THAT(error_of([&] { c.get_float("hidden_act"); }), HasSubstr("hidden_act"));
  EXPECT_THAT(error_of([&] { c.get_float("rope_scaling"); }), HasSubstr("missing"));
  // A present value of the wrong type is an error even with a default.
  EXPECT_THAT(error_of([&] { c.get_int_or("hidden_act", 3); }), HasSubstr("hidden_act"));
}

TEST(ModelConfig, NestedTextConfigIsMerged) {
  TempDir dir;
  write_bytes(dir / "config.json", R"({
    "model_type": "gemma3", "tie_word_embeddings": true, "eos_token_id": [1, 106],
    "hidden_size": 9999,
    "vision_config": {"hidden_size": 1152},
    "text_config": {"model_type": "gemma3_text", "hidden_size": 640, "eos_token_id": 1,
                    "head_dim": 256}})");
  write_bytes(dir / "generation_config.json",
              R"({"eos_token_id": [106, null, 1, 107], "top_k": 64})");
  auto c = ModelConfig::load(dir.path());
  EXPECT_TRUE(c.is_wrapped());
  EXPECT_EQ(c.model_type(), "gemma3_text");
  EXPECT_EQ(c.wrapper_model_type(), "gemma3");
  EXPECT_EQ(c.get_int("hidden_size"), 640);        // the text value wins over the outer one
  EXPECT_TRUE(c.get_bool("tie_word_embeddings"));  // merged from the top level
  EXPECT_FALSE(c.has("text_config"));
  EXPECT_EQ(c.full()["vision_config"]["hidden_size"], 1152);
  EXPECT_EQ(c.generation()["top_k"], 64);
  EXPECT_EQ(c.eos_token_ids(), (std::vector<int64_t>{106, 1, 107}));
  // Errors name the nested field.
  EXPECT_THAT(error_of([&] { c.get_string("head_dim"); }), HasSubstr("text_config.head_dim"));
}

TEST(ModelConfig, TextConfigWithoutModelTypeUsesOuter) {
  auto c = ModelConfig::from_json(
      nlohmann::json::parse(R"({"model_type": "qwen3_5", "text_config": {"hidden_size": 8}})"));
  EXPECT_EQ(c.model_type(), "qwen3_5");
  EXPECT_EQ(c.wrapper_model_type(), "qwen3_5");
  EXPECT_EQ(c.get_int("hidden_size"), 8);
  EXPECT_TRUE(c.eos_token_ids().empty());
}

TEST(ModelConfig, LoadErrorsNameThePath) {
  TempDir dir;
  const std::string file = (dir / "config.json").string();
  EXPECT_THAT(error_of([&] { ModelConfig::load(dir.path()); }), HasSubstr(file));
  write_bytes(dir / "config.json", "{\"model_type\": ");
  std::string msg = error_of([&] { ModelConfig::load(dir.path()); });
  EXPECT_THAT(msg, HasSubstr(file));
  EXPECT_THAT(msg, HasSubstr("JSON"));
  write_bytes(dir / "config.json", "[1]");
  EXPECT_THAT(error_of([&] { ModelConfig::load(dir.path()); }), HasSubstr("object"));
  write_bytes(dir / "config.json", R"({"hidden_size": 4})");
  msg = error_of([&] { ModelConfig::load(dir.path()); });
  EXPECT_THAT(msg, HasSubstr(file));
  EXPECT_THAT(msg, HasSubstr("model_type"));
  write_bytes(dir / "config.json", R"({"model_type": 3})");
  EXPECT_THAT(error_of([&] { ModelConfig::load(dir.path()); }), HasSubstr("model_type"));
  write_bytes(dir / "config.json", R"({"model_type": "llama", "text_config": []})");
  EXPECT_THAT(error_of([&] { ModelConfig::load(dir.path()); }), HasSubstr("text_config"));

  write_bytes(dir / "config.json", R"({"model_type": "llama", "eos_token_id": "x"})");
  auto c = ModelConfig::load(dir.path());
  EXPECT_THAT(error_of([&] { c.eos_token_ids(); }), HasSubstr("eos_token_id"));

  write_bytes(dir / "generation_config.json", "not json");
  msg = error_of([&] { ModelConfig::load(dir.path()); });
  EXPECT_THAT(msg, HasSubstr("generation_config.json"));

  // Copying, merging and printing a document recurse over it: deep nesting is refused at the
  // parse instead of overflowing the stack later.
  write_bytes(dir / "config.json", R"({"model_type": "llama", "hidden_size": )" +
                                       std::string(100000, '[') + std::string(100000, ']') + "}");
  msg = error_of([&] { ModelConfig::load(dir.path()); });
  EXPECT_THAT(msg, HasSubstr(file));
  EXPECT_THAT(msg, HasSubstr("nested deeper than 128 levels"));
}

TEST(ModelConfig, RangeCheckedAccessorsNameFieldValueAndBound) {
  auto c = ModelConfig::from_json(nlohmann::json::parse(R"({
    "model_type": "llama", "num_hidden_layers": 2147483648, "eps": -1.5, "f": 0, "n": 3,
    "text": "x", "big": 1e300})"));
  std::string msg = error_of([&] { c.get_int_in("num_hidden_layers", 1, 1024, "why not"); });
  EXPECT_THAT(msg, HasSubstr("config.json: field 'num_hidden_layers' is 2147483648"));
  EXPECT_THAT(msg, HasSubstr("[1, 1024] (why not)"));
  EXPECT_EQ(c.get_int_in("n", 1, 3), 3);
  EXPECT_EQ(c.get_int_in_or("absent", -7, 1, 3), -7);  // the fallback is the caller's
  EXPECT_THAT(error_of([&] { c.get_int_in_or("text", 1, 1, 3); }), HasSubstr("'text'"));
  EXPECT_THAT(error_of([&] { c.get_int_in_or("big", 1, 1, 3); }), HasSubstr("'big'"));
  msg = error_of([&] { c.get_float_in_or("eps", 1e-6, 0.0, 1.0); });
  EXPECT_THAT(msg, HasSubstr("'eps' is -1.5"));
  EXPECT_THAT(msg, HasSubstr("[0, 1]"));
  EXPECT_DOUBLE_EQ(c.get_float_in_or("f", 1.0, 0.0, 1.0), 0.0);
  EXPECT_THAT(error_of([&] { c.get_float_in_or("f", 1.0, 0.0, 1.0, true); }), HasSubstr("(0, 1]"));
  EXPECT_THAT(error_of([&] { c.get_float_in_or("big", 1.0, 0.0, 1e299); }), HasSubstr("'big'"));
  EXPECT_THAT(error_of([&] { c.get_float_in_or("text", 1.0, 0.0, 1.0); }), HasSubstr("'text'"));
  // A huge value is cut short in the message.
  auto long_config =
      ModelConfig::from_json({{"model_type", "llama"}, {"n", std::vector<int>(10000, 1)}});
  msg = error_of([&] { long_config.get_int_in("n", 1, 3); });
  EXPECT_LT(msg.size(), 300u);
}

TEST(ModelConfig, EosIdsMustBeTokenIds) {
  for (const char* bad : {"-1", "2147483648", "18446744073709551615", "[2, -5]"}) {
    auto c = ModelConfig::from_json(nlohmann::json::parse(
        std::string(R"({"model_type": "llama", "eos_token_id": )") + bad + "}"));
    EXPECT_THAT(error_of([&] { c.eos_token_ids(); }), HasSubstr("eos_token_id")) << bad;
  }
  auto c = ModelConfig::from_json(
      nlohmann::json::parse(R"({"model_type": "llama", "eos_token_id": [0, 2147483647]})"));
  EXPECT_EQ(c.eos_token_ids(), (std::vector<int64_t>{0, 2147483647}));
}

}  // namespace
}  // namespace hearth
