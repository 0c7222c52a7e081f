// config.json values that size buffers or index into them, one test per class of bad value: each
// is a hearth::Error naming the field (with its path inside text_config / rope_parameters), and
// for a value out of range the value and the bound. Descriptors are built from configs alone,
// so no weights are needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "loader/config.h"
#include "loader_test_util.h"
#include "models/llama.h"
#include "models/qwen3_5.h"
#include "runtime/generate.h"

namespace hearth {
namespace {

using nlohmann::json;
using test::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;

const json kLlama = json::parse(R"({
  "model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "tie_word_embeddings": false,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}})");

const json kQwen35 = json::parse(R"({
  "model_type": "qwen3_5_text", "hidden_size": 64, "intermediate_size": 96,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
  "vocab_size": 256, "max_position_embeddings": 512,
  "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
  "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_num_key_heads": 2,
  "linear_num_value_heads": 4, "linear_value_head_dim": 32,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default",
                      "partial_rotary_factor": 0.25}})");

const json kQwen3Moe = json::parse(R"({
  "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
  "mlp_only_layers": [1], "decoder_sparse_step": 1})");

// `base` with `patch` merged in (RFC 7396: a null in the patch removes the key).
json patched(const json& base, const json& patch) {
  json c = base;
  c.merge_patch(patch);
  return c;
}

std::string llama_error(const json& patch, const json& base = kLlama) {
  const ModelConfig c = ModelConfig::from_json(patched(base, patch));
  return error_of([&] { llama_descriptor_from_config(c); });
}

std::string qwen_error(const json& patch, const json& base = kQwen35) {
  const ModelConfig c = ModelConfig::from_json(patched(base, patch));
  return error_of([&] { qwen3_5_descriptor_from_config(c); });
}

TEST(ModelConfigChecks, BaseConfigsAreValid) {
  EXPECT_NO_THROW(llama_descriptor_from_config(ModelConfig::from_json(kLlama)));
  EXPECT_NO_THROW(qwen3_5_descriptor_from_config(ModelConfig::from_json(kQwen35)));
  EXPECT_NO_THROW(qwen3_5_descriptor_from_config(ModelConfig::from_json(kQwen3Moe)));
}

// A string, a float, a boolean, an object or a number too large for int64 where an integer
// size belongs.
TEST(ModelConfigChecks, WrongTypeNamesTheField) {
  for (const char* key :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings"}) {
    for (const json& bad : {json("12"), json(1.5), json(1e300), json(true), json::object(),
                            json::array({1}), json(18446744073709551615ull)}) {
      const std::string e = llama_error({{key, bad}});
      EXPECT_THAT(e, AllOf(HasSubstr("config.json"), HasSubstr(std::string("'") + key + "'")))
          << key << " = " << bad.dump();
    }
  }
  EXPECT_THAT(llama_error({{"tie_word_embeddings", "yes"}}), HasSubstr("tie_word_embeddings"));
  EXPECT_THAT(llama_error({{"tie_word_embeddings", 1}}), HasSubstr("tie_word_embeddings"));
  EXPECT_THAT(llama_error({{"rms_norm_eps", "small"}}), HasSubstr("rms_norm_eps"));
  EXPECT_THAT(llama_error({{"hidden_size", nullptr}}), HasSubstr("missing field 'hidden_size'"));
}

TEST(ModelConfigChecks, NonPositiveSizesNameTheFieldAndBound) {
  for (const char* key :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings"}) {
    for (int64_t bad : {int64_t(0), int64_t(-1), INT64_MIN}) {
      const std::string e = llama_error({{key, bad}});
      EXPECT_THAT(e, AllOf(HasSubstr(key), HasSubstr(std::to_string(bad)), HasSubstr("[1, ")))
          << key << " = " << bad;
    }
  }
}

TEST(ModelConfigChecks, LayerCountIsBounded) {
  // 2^31 layers used to reach a per-layer table as std::bad_alloc.
  for (int64_t bad : {int64_t(1025), int64_t(1) << 31, INT64_MAX}) {
    const std::string e = llama_error({{"num_hidden_layers", bad}});
    EXPECT_THAT(e, AllOf(HasSubstr("'num_hidden_layers'"), HasSubstr(std::to_string(bad)),
                         HasSubstr("[1, 1024]")));
    EXPECT_THAT(qwen_error({{"num_hidden_layers", bad}, {"layer_types", nullptr}}),
                HasSubstr("num_hidden_layers"));
  }
  EXPECT_NO_THROW(llama_descriptor_from_config(
      ModelConfig::from_json(patched(kLlama, {{"num_hidden_layers", 1024}}))));
}

TEST(ModelConfigChecks, WidthsAreBounded) {
  for (const char* key : {"hidden_size", "intermediate_size"})
    EXPECT_THAT(llama_error({{key, int64_t(1) << 40}}),
                AllOf(HasSubstr(key), HasSubstr("1099511627776"), HasSubstr("1048576")));
  EXPECT_THAT(llama_error({{"vocab_size", int64_t(1) << 31}}),
              AllOf(HasSubstr("vocab_size"), HasSubstr("2147483647"), HasSubstr("int32")));
  EXPECT_THAT(llama_error({{"max_position_embeddings", int64_t(1) << 31}}),
              AllOf(HasSubstr("max_position_embeddings"), HasSubstr("2147483647")));
}

TEST(ModelConfigChecks, HeadCountsAndDims) {
  std::string e = llama_error({{"num_key_value_heads", 3}});
  EXPECT_THAT(e, AllOf(HasSubstr("num_attention_heads (4)"), HasSubstr("num_key_value_heads (3)")));
  e = llama_error({{"num_key_value_heads", 8}});  // more KV heads than query heads
  EXPECT_THAT(e, HasSubstr("num_key_value_heads (8)"));
  EXPECT_THAT(llama_error({{"num_attention_heads", 1 << 20}}),
              AllOf(HasSubstr("num_attention_heads"), HasSubstr("4096")));
  EXPECT_THAT(llama_error({{"head_dim", 1 << 20}}),
              AllOf(HasSubstr("head_dim"), HasSubstr("4096")));
  // Without head_dim it is hidden_size / num_attention_heads, which must then divide evenly.
  e = llama_error({{"head_dim", nullptr}, {"hidden_size", 66}});
  EXPECT_THAT(
      e, AllOf(HasSubstr("hidden_size"), HasSubstr("num_attention_heads"), HasSubstr("head_dim")));
  e = llama_error({{"head_dim", nullptr},
                   {"hidden_size", 1 << 20},
                   {"num_attention_heads", 2},
                   {"num_key_value_heads", 2}});
  EXPECT_THAT(e, AllOf(HasSubstr("head_dim"), HasSubstr("524288")));
  EXPECT_NO_THROW(llama_descriptor_from_config(
      ModelConfig::from_json(patched(kLlama, {{"head_dim", nullptr}}))));
}

TEST(ModelConfigChecks, NestedFieldsAreNamedWithTheirPath) {
  const json wrapped = {{"model_type", "qwen3_5"}, {"text_config", kQwen35}};
  std::string e = qwen_error({{"text_config", {{"num_hidden_layers", 100000}}}}, wrapped);
  EXPECT_THAT(e, HasSubstr("'text_config.num_hidden_layers'"));
  e = qwen_error({{"text_config", {{"rope_parameters", {{"partial_rotary_factor", 1.5}}}}}},
                 wrapped);
  EXPECT_THAT(e, HasSubstr("'text_config.rope_parameters.partial_rotary_factor'"));
}

// partial_rotary_factor above 1 used to make rotary_dim exceed head_dim: the rope kernel then
// wrote past every head (heap corruption at load).
TEST(ModelConfigChecks, PartialRotaryFactor) {
  for (double bad : {1.5, 0.0, -1.0, 1e300}) {
    std::string e = llama_error({{"partial_rotary_factor", bad}});
    EXPECT_THAT(e, AllOf(HasSubstr("'partial_rotary_factor'"), HasSubstr("(0, 1]"))) << bad;
    e = llama_error({{"rope_parameters", {{"partial_rotary_factor", bad}}}});
    EXPECT_THAT(e, HasSubstr("'rope_parameters.partial_rotary_factor'")) << bad;
    e = qwen_error({{"rope_parameters", {{"partial_rotary_factor", bad}}}});
    EXPECT_THAT(e, HasSubstr("'rope_parameters.partial_rotary_factor'")) << bad;
  }
  EXPECT_THAT(llama_error({{"partial_rotary_factor", "half"}}), HasSubstr("partial_rotary_factor"));
  // 16 × 0.1 rounds to 0 rotated dimensions.
  EXPECT_THAT(llama_error({{"partial_rotary_factor", 0.1}}),
              AllOf(HasSubstr("partial_rotary_factor"), HasSubstr("head_dim (16)")));
  const LlamaDescriptor d = llama_descriptor_from_config(
      ModelConfig::from_json(patched(kLlama, {{"partial_rotary_factor", 1.0}})));
  EXPECT_EQ(d.ropes[0].rotary_dim, 16);
  const Qwen35Descriptor q = qwen3_5_descriptor_from_config(ModelConfig::from_json(kQwen35));
  EXPECT_EQ(q.rope.rotary_dim, 8);
}

TEST(ModelConfigChecks, RopeScaling) {
  auto rope = [](const json& params) {
    return llama_error({{"rope_parameters", nullptr}, {"rope_scaling", params}});
  };
  for (const json& bad : {json(0), json(-1), json(1e300), json("x")})
    EXPECT_THAT(rope({{"type", "linear"}, {"factor", bad}}), HasSubstr("'rope_scaling.factor'"))
        << bad.dump();
  EXPECT_THAT(rope("linear"), HasSubstr("'rope_scaling'"));
  EXPECT_THAT(rope({{"type", 3}}), HasSubstr("'rope_scaling.type'"));
  EXPECT_THAT(rope({{"rope_type", "longrope"}}), HasSubstr("longrope"));
  // llama3: high_freq_factor must exceed low_freq_factor (the blend divides by the difference).
  std::string e = rope({{"rope_type", "llama3"},
                        {"factor", 8},
                        {"low_freq_factor", 4},
                        {"high_freq_factor", 4},
                        {"original_max_position_embeddings", 64}});
  EXPECT_THAT(e, AllOf(HasSubstr("rope_scaling.high_freq_factor"),
                       HasSubstr("rope_scaling.low_freq_factor")));
  EXPECT_THAT(rope({{"rope_type", "llama3"}, {"factor", 8}, {"low_freq_factor", -1}}),
              HasSubstr("rope_scaling.low_freq_factor"));
  // yarn
  for (const json& bad : {json(0), json(-1), json(2.5), json(1e300)})
    EXPECT_THAT(
        rope({{"rope_type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", bad}}),
        HasSubstr("rope_scaling.original_max_position_embeddings"))
        << bad.dump();
  EXPECT_THAT(rope({{"rope_type", "yarn"}, {"factor", 4}, {"beta_fast", 0}}),
              HasSubstr("rope_scaling.beta_fast"));
  EXPECT_THAT(rope({{"rope_type", "yarn"}, {"factor", 4}, {"beta_slow", -1}}),
              HasSubstr("rope_scaling.beta_slow"));
  EXPECT_THAT(rope({{"rope_type", "yarn"}, {"factor", 4}, {"attention_factor", -1}}),
              HasSubstr("rope_scaling.attention_factor"));
  EXPECT_THAT(rope({{"rope_type", "yarn"}, {"factor", 4}, {"mscale", 1e300}}),
              HasSubstr("rope_scaling.mscale"));
  EXPECT_THAT(rope({{"rope_type", "yarn"}, {"factor", 4}, {"truncate", "no"}}),
              HasSubstr("rope_scaling.truncate"));
  EXPECT_THAT(rope({{"rope_type", "dynamic"}, {"factor", 0}}), HasSubstr("rope_scaling.factor"));
  // rope_theta, from the parameters or the top level.
  EXPECT_THAT(llama_error({{"rope_parameters", {{"rope_theta", 0}}}}),
              HasSubstr("'rope_parameters.rope_theta'"));
  EXPECT_THAT(llama_error({{"rope_parameters", nullptr}, {"rope_theta", -1}}),
              HasSubstr("'rope_theta'"));
  // Per layer type (gemma3's v5 layout).
  EXPECT_THAT(llama_error({{"rope_parameters", {{"full_attention", 5}}}}),
              HasSubstr("'rope_parameters.full_attention'"));
  EXPECT_THAT(llama_error({{"rope_parameters",
                            {{"full_attention", {{"rope_type", "linear"}, {"factor", -2}}}}}}),
              HasSubstr("'rope_parameters.full_attention.factor'"));
}

TEST(ModelConfigChecks, SlidingWindowsAndLayerLists) {
  const json mistral = patched(kLlama, {{"model_type", "mistral"}});
  EXPECT_THAT(llama_error({{"sliding_window", 0}}, mistral), HasSubstr("sliding_window"));
  EXPECT_THAT(llama_error({{"sliding_window", int64_t(1) << 31}}, mistral),
              AllOf(HasSubstr("sliding_window"), HasSubstr("2147483647")));
  EXPECT_THAT(llama_error({{"sliding_window", "wide"}}, mistral), HasSubstr("sliding_window"));
  // layer_types: one entry per layer, each a known kind.
  EXPECT_THAT(llama_error({{"layer_types", {"full_attention"}}}),
              AllOf(HasSubstr("layer_types has 1 entries"), HasSubstr("num_hidden_layers")));
  EXPECT_THAT(llama_error({{"layer_types", "full_attention"}}), HasSubstr("'layer_types'"));
  EXPECT_THAT(llama_error({{"layer_types", {"full_attention", 7}}}), HasSubstr("'layer_types[1]'"));
  EXPECT_THAT(qwen_error({{"layer_types", {"linear_attention"}}}),
              HasSubstr("layer_types has 1 entries"));
  EXPECT_THAT(qwen_error({{"layer_types", json::array({nullptr, 1, 2, 3})}}),
              HasSubstr("'layer_types[0]'"));
  // Patterns that divide or index by a config value.
  const json gemma3 = patched(kLlama, {{"model_type", "gemma3_text"}, {"sliding_window", 8}});
  EXPECT_THAT(llama_error({{"sliding_window_pattern", 0}}, gemma3),
              HasSubstr("'sliding_window_pattern'"));
  const json qwen2 = patched(
      kLlama, {{"model_type", "qwen2"}, {"use_sliding_window", true}, {"sliding_window", 8}});
  EXPECT_THAT(llama_error({{"max_window_layers", -1}}, qwen2), HasSubstr("'max_window_layers'"));
  const json smollm3 = patched(kLlama, {{"model_type", "smollm3"}});
  EXPECT_THAT(llama_error({{"no_rope_layer_interval", 0}}, smollm3),
              HasSubstr("'no_rope_layer_interval'"));
  EXPECT_THAT(llama_error({{"no_rope_layers", {1}}}, smollm3),
              HasSubstr("no_rope_layers has 1 entries"));
  EXPECT_THAT(llama_error({{"no_rope_layers", {1, "x"}}}, smollm3),
              HasSubstr("'no_rope_layers[1]'"));
  EXPECT_THAT(qwen_error({{"layer_types", nullptr}, {"full_attention_interval", 0}}),
              HasSubstr("'full_attention_interval'"));
}

TEST(ModelConfigChecks, LinearAttentionDims) {
  for (const char* key : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                          "linear_value_head_dim", "linear_conv_kernel_dim"}) {
    for (const json& bad : {json(0), json(-1), json(int64_t(1) << 31), json("4")})
      EXPECT_THAT(qwen_error({{key, bad}}), HasSubstr(std::string("'") + key + "'"))
          << key << " = " << bad.dump();
  }
  EXPECT_THAT(
      qwen_error({{"linear_num_value_heads", 3}}),
      AllOf(HasSubstr("linear_num_value_heads (3)"), HasSubstr("linear_num_key_heads (2)")));
}

TEST(ModelConfigChecks, MixtureOfExperts) {
  auto moe = [](const json& patch) { return qwen_error(patch, kQwen3Moe); };
  EXPECT_THAT(moe({{"num_experts", -1}}), HasSubstr("'num_experts'"));
  EXPECT_THAT(moe({{"num_experts", int64_t(1) << 40}}),
              AllOf(HasSubstr("'num_experts'"), HasSubstr("65536")));
  EXPECT_THAT(moe({{"num_experts", nullptr}, {"num_local_experts", -3}}),
              HasSubstr("'num_local_experts'"));
  EXPECT_THAT(
      moe({{"num_experts_per_tok", 9}}),
      AllOf(HasSubstr("'num_experts_per_tok'"), HasSubstr("[1, 8]"), HasSubstr("num_experts")));
  EXPECT_THAT(moe({{"num_experts_per_tok", 0}}), HasSubstr("'num_experts_per_tok'"));
  EXPECT_THAT(moe({{"num_experts_per_tok", nullptr}}), HasSubstr("num_experts_per_tok"));
  EXPECT_THAT(moe({{"moe_intermediate_size", 0}}), HasSubstr("'moe_intermediate_size'"));
  EXPECT_THAT(moe({{"shared_expert_intermediate_size", -1}}),
              HasSubstr("'shared_expert_intermediate_size'"));
  EXPECT_THAT(moe({{"decoder_sparse_step", 0}}), HasSubstr("'decoder_sparse_step'"));
  EXPECT_THAT(moe({{"mlp_only_layers", {3}}}),
              AllOf(HasSubstr("'mlp_only_layers[0]'"), HasSubstr("[0, 3)")));
  EXPECT_THAT(moe({{"mlp_only_layers", {-1}}}), HasSubstr("'mlp_only_layers[0]'"));
  EXPECT_THAT(moe({{"mlp_only_layers", {"1"}}}), HasSubstr("'mlp_only_layers[0]'"));
  EXPECT_THAT(moe({{"mlp_only_layers", 1}}), HasSubstr("'mlp_only_layers'"));
  // A dense layer needs intermediate_size.
  EXPECT_THAT(moe({{"intermediate_size", nullptr}}), HasSubstr("intermediate_size"));
}

// Scalars the forward casts to float must be finite floats with the sign their formula needs.
TEST(ModelConfigChecks, FloatScalars) {
  EXPECT_THAT(llama_error({{"rms_norm_eps", -1}}), HasSubstr("'rms_norm_eps'"));
  EXPECT_THAT(llama_error({{"rms_norm_eps", 1e300}}), HasSubstr("'rms_norm_eps'"));
  const json granite = patched(kLlama, {{"model_type", "granite"}});
  EXPECT_THAT(llama_error({{"logits_scaling", 0}}, granite), HasSubstr("'logits_scaling'"));
  EXPECT_THAT(llama_error({{"embedding_multiplier", 1e300}}, granite),
              HasSubstr("'embedding_multiplier'"));
  const json gemma2 = patched(kLlama, {{"model_type", "gemma2"}, {"sliding_window", 8}});
  EXPECT_THAT(llama_error({{"query_pre_attn_scalar", 0}}, gemma2),
              HasSubstr("'query_pre_attn_scalar'"));
  EXPECT_THAT(llama_error({{"attn_logit_softcapping", -1}}, gemma2),
              HasSubstr("'attn_logit_softcapping'"));
  EXPECT_THAT(qwen_error({{"rms_norm_eps", -1e-6}}), HasSubstr("'rms_norm_eps'"));
}

// The KV cache at max_position_embeddings: each factor within its bound, the product not.
TEST(ModelConfigChecks, KvCacheSizeMustFitInt64) {
  const json huge = {{"num_hidden_layers", 1024},
                     {"max_position_embeddings", INT32_MAX},
                     {"num_attention_heads", 4096},
                     {"num_key_value_heads", 4096},
                     {"head_dim", 4096},
                     {"hidden_size", 1 << 20}};
  std::string e = llama_error(huge);
  EXPECT_THAT(e, AllOf(HasSubstr("KV cache"), HasSubstr("64 bits"),
                       HasSubstr("max_position_embeddings (2147483647)"),
                       HasSubstr("num_key_value_heads (4096)"), HasSubstr("head_dim (4096)")));
  json all_attention = huge;  // a patch: the null removes layer_types
  all_attention["layer_types"] = nullptr;
  all_attention["full_attention_interval"] = 1;
  e = qwen_error(all_attention);
  EXPECT_THAT(e, HasSubstr("KV cache"));
}

// generation_config.json's top_k becomes an int: out of range is an error naming the field.
TEST(ModelConfigChecks, GenerationTopK) {
  for (const json& bad : {json(1e300), json(-1), json(int64_t(1) << 40)}) {
    const ModelConfig c = ModelConfig::from_json(kLlama, {{"do_sample", true}, {"top_k", bad}});
    EXPECT_THAT(error_of([&] { sampling_defaults(c); }),
                AllOf(HasSubstr("generation_config.json"), HasSubstr("'top_k'")))
        << bad.dump();
  }
  const ModelConfig c = ModelConfig::from_json(kLlama, {{"do_sample", true}, {"top_k", 20}});
  EXPECT_EQ(sampling_defaults(c).top_k, 20);
}

}  // namespace
}  // namespace hearth
