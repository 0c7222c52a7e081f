// LlamaDescriptor from config.json: the per-model_type switches of the llama-family decoder and
// the defaults each Hugging Face config class applies when a field is absent.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "models/config_checks.h"
#include "models/llama.h"

namespace hearth {

namespace {

using config_limits::kFloatMax;
using nlohmann::json;

Activation parse_activation(const ModelConfig& c, const std::string& name) {
  if (name == "silu" || name == "swish") return Activation::Silu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast")
    return Activation::GeluTanh;
  if (name == "gelu") return Activation::Gelu;
  fail("{}: activation '{}' is not supported (silu, gelu, gelu_pytorch_tanh)", c.source(), name);
}

// Per layer "full_attention" / "sliding_attention", from layer_types or the family's pattern.
std::vector<std::string> layer_types(const ModelConfig& c, const std::string& type,
                                     int64_t n_layer) {
  std::vector<std::string> types(size_t(n_layer), "full_attention");
  if (const json* list = layer_list(c, "layer_types", n_layer)) {
    for (size_t i = 0; i < types.size(); ++i) {
      const json& v = (*list)[i];
      if (!v.is_string() || (v != "full_attention" && v != "sliding_attention"))
        c.fail_field(fmt::format("{}[{}]", c.field_name("layer_types"), i), v,
                     "\"full_attention\" or \"sliding_attention\"");
      types[i] = v.get<std::string>();
    }
    return types;
  }
  const bool has_window = c.has("sliding_window");
  if (type == "gemma2") {
    for (int64_t i = 0; i < n_layer; ++i)
      types[size_t(i)] = (i + 1) % 2 ? "sliding_attention" : "full_attention";
  } else if (type == "gemma3_text") {
    const int64_t pattern = c.get_int_in_or("sliding_window_pattern", 6, 1, INT64_MAX);
    for (int64_t i = 0; i < n_layer; ++i)
      types[size_t(i)] = (i + 1) % pattern ? "sliding_attention" : "full_attention";
  } else if (type == "qwen2" || type == "smollm3") {
    if (c.get_bool_or("use_sliding_window", false) && has_window) {
      const int64_t from = c.get_int_in_or("max_window_layers", n_layer, 0, INT64_MAX);
      for (int64_t i = from; i < n_layer; ++i) types[size_t(i)] = "sliding_attention";
    }
  } else if (type == "mistral" || type == "phi3") {
    if (has_window) std::fill(types.begin(), types.end(), "sliding_attention");
  }
  return types;
}

// SmolLM3's per-layer rope switch: no_rope_layers (1 = rope, 0 = none), else every
// no_rope_layer_interval-th layer without.
std::vector<bool> rope_layers(const ModelConfig& c, int64_t n_layer) {
  std::vector<bool> use(size_t(n_layer), true);
  if (const json* list = layer_list(c, "no_rope_layers", n_layer)) {
    for (size_t i = 0; i < use.size(); ++i) {
      const json& v = (*list)[i];
      if (!v.is_number_integer() || (v != 0 && v != 1))
        c.fail_field(fmt::format("{}[{}]", c.field_name("no_rope_layers"), i), v, "0 or 1");
      use[i] = v != 0;
    }
    return use;
  }
  const int64_t interval = c.get_int_in_or("no_rope_layer_interval", 4, 1, INT64_MAX);
  for (int64_t i = 0; i < n_layer; ++i) use[size_t(i)] = (i + 1) % interval != 0;
  return use;
}

}  // namespace

const std::vector<std::string>& llama_model_types() {
  static const std::vector<std::string> types = {"llama", "mistral", "qwen2",       "qwen3",
                                                 "gemma", "gemma2",  "gemma3_text", "phi3",
                                                 "olmo2", "granite", "smollm3"};
  return types;
}

LlamaDescriptor llama_descriptor_from_config(const ModelConfig& c) {
  LlamaDescriptor d;
  const std::string type = c.model_type();
  d.model_type = type;
  const AttentionDims dims = read_attention_dims(c);
  d.n_embd = dims.n_embd;
  d.n_layer = dims.n_layer;
  d.n_head = dims.n_head;
  d.n_head_kv = dims.n_head_kv;
  d.head_dim = dims.head_dim;
  d.n_vocab = dims.n_vocab;
  d.n_ctx_train = dims.n_ctx_train;
  d.n_ff = c.get_int_in("intermediate_size", 1, config_limits::kWidth);
  check_kv_cache_size(c, dims, d.n_layer);

  const bool gemma = type == "gemma" || type == "gemma2" || type == "gemma3_text";
  // Scalars the forward casts to float: finite and within float range.
  d.norm_eps = float(c.get_float_in_or("rms_norm_eps", 1e-6, 0.0, kFloatMax));
  d.norm_offset = gemma ? 1.0f : 0.0f;
  const bool tie_default = gemma;
  d.tied_embeddings = c.get_bool_or("tie_word_embeddings", tie_default);

  const bool attention_bias = c.get_bool_or("attention_bias", false);
  d.qkv_bias = attention_bias || type == "qwen2";
  d.o_bias = attention_bias && type != "qwen2";
  d.mlp_bias = c.get_bool_or("mlp_bias", false);
  if (type == "qwen3" || type == "gemma3_text") d.qk_norm = QkNorm::PerHead;
  if (type == "olmo2") d.qk_norm = QkNorm::Full;

  if (type == "gemma2" || type == "gemma3_text") {
    d.post_attn_norm = true;
    d.post_ffn_norm = true;
    d.ffn_norm_name = "pre_feedforward_layernorm";
  }
  if (type == "olmo2") {
    d.input_norm = false;
    d.pre_ffn_norm = false;
    d.post_attn_norm = true;
    d.post_ffn_norm = true;
  }
  if (type == "phi3") d.fused_qkv = d.fused_gate_up = true;

  std::string act = c.get_string_or("hidden_act", "silu");
  if (gemma)
    act = c.get_string_or("hidden_activation", c.get_string_or("hidden_act", "gelu_pytorch_tanh"));
  if (type == "gemma" && act == "gelu") act = "gelu_pytorch_tanh";  // HF Gemma forces the tanh form
  d.act = parse_activation(c, act);

  if (gemma) d.embed_scale = std::sqrt(float(d.n_embd));
  if (type == "granite") {
    d.embed_scale = float(c.get_float_in_or("embedding_multiplier", 1.0, -kFloatMax, kFloatMax));
    d.residual_scale = float(c.get_float_in_or("residual_multiplier", 1.0, -kFloatMax, kFloatMax));
    // The logits are multiplied by its inverse, which must be a float too.
    d.logits_scale =
        float(1.0 / c.get_float_in_or("logits_scaling", 1.0, 1.0 / kFloatMax, kFloatMax));
  }
  d.attn_scale = 1.0f / std::sqrt(float(d.head_dim));
  if (type == "gemma2" || type == "gemma3_text")
    d.attn_scale =
        float(1.0 / std::sqrt(c.get_float_in_or("query_pre_attn_scalar", double(d.head_dim),
                                                1.0 / kFloatMax, kFloatMax)));
  if (type == "granite")
    d.attn_scale =
        float(c.get_float_in_or("attention_multiplier", d.attn_scale, -kFloatMax, kFloatMax));
  d.attn_softcap = float(c.get_float_in_or("attn_logit_softcapping", 0.0, 0.0, kFloatMax));
  d.final_softcap = float(c.get_float_in_or("final_logit_softcapping", 0.0, 0.0, kFloatMax));

  const auto types = layer_types(c, type, d.n_layer);
  d.ropes.push_back(rope_spec_from_config(c, "full_attention", int(d.head_dim), 1.0));
  const json* rope_parameters =
      c.raw().contains("rope_parameters") ? &c.raw()["rope_parameters"] : nullptr;
  const bool distinct_local_rope =
      c.has("rope_local_base_freq") || (rope_parameters && rope_parameters->is_object() &&
                                        rope_parameters->contains("sliding_attention"));
  if (distinct_local_rope)
    d.ropes.push_back(rope_spec_from_config(c, "sliding_attention", int(d.head_dim), 1.0));
  const bool any_sliding =
      std::find(types.begin(), types.end(), "sliding_attention") != types.end();
  // The window sizes a ring per sliding layer and is stored as an int. Where no layer slides,
  // configs often carry any value (or null), so only its type is checked then.
  c.get_int_or("sliding_window", 0);
  const int64_t window =
      any_sliding ? c.get_int_in_or("sliding_window", 0, 1, config_limits::kPositions) : 0;
  for (int64_t i = 0; i < d.n_layer; ++i) {
    const bool sliding = types[size_t(i)] == "sliding_attention";
    if (sliding && window <= 0)
      fail("{}: layer {} is a sliding-window layer but {} is not set", c.source(), i,
           c.field_name("sliding_window"));
    d.window.push_back(sliding ? int(window) : 0);
    d.rope_index.push_back(sliding && distinct_local_rope ? 1 : 0);
  }
  d.use_rope.assign(size_t(d.n_layer), true);
  if (type == "smollm3") d.use_rope = rope_layers(c, d.n_layer);
  return d;
}

}  // namespace hearth
