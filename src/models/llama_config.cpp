// LlamaDescriptor from config.json: the per-model_type switches of the llama-family decoder and
// the defaults each Hugging Face config class applies when a field is absent.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/config_checks.h"
#include "models/llama.h"

namespace hearth {

namespace {

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
  const auto& raw = c.raw();
  if (raw.contains("layer_types") && raw["layer_types"].is_array()) {
    if (int64_t(raw["layer_types"].size()) != n_layer)
      fail("{}: layer_types has {} entries, num_hidden_layers is {}", c.source(),
           raw["layer_types"].size(), n_layer);
    for (size_t i = 0; i < types.size(); ++i) {
      if (!raw["layer_types"][i].is_string())
        fail("{}: layer_types[{}] is not a string", c.source(), i);
      types[i] = raw["layer_types"][i].get<std::string>();
      if (types[i] != "full_attention" && types[i] != "sliding_attention")
        fail("{}: layer_types[{}] = '{}' is not supported", c.source(), i, types[i]);
    }
    return types;
  }
  const bool has_window = c.has("sliding_window");
  if (type == "gemma2") {
    for (int64_t i = 0; i < n_layer; ++i)
      types[size_t(i)] = (i + 1) % 2 ? "sliding_attention" : "full_attention";
  } else if (type == "gemma3_text") {
    const int64_t pattern = c.get_int_or("sliding_window_pattern", 6);
    for (int64_t i = 0; i < n_layer; ++i)
      types[size_t(i)] = (i + 1) % pattern ? "sliding_attention" : "full_attention";
  } else if (type == "qwen2" || type == "smollm3") {
    if (c.get_bool_or("use_sliding_window", false) && has_window) {
      const int64_t from = c.get_int_or("max_window_layers", n_layer);
      for (int64_t i = from; i < n_layer; ++i) types[size_t(i)] = "sliding_attention";
    }
  } else if (type == "mistral" || type == "phi3") {
    if (has_window) std::fill(types.begin(), types.end(), "sliding_attention");
  }
  return types;
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
  d.n_embd = c.get_int("hidden_size");
  d.n_layer = c.get_int("num_hidden_layers");
  d.n_head = c.get_int("num_attention_heads");
  d.n_head_kv = c.get_int_or("num_key_value_heads", d.n_head);
  d.head_dim = c.get_int_or("head_dim", d.n_head > 0 ? d.n_embd / d.n_head : 0);
  d.n_ff = c.get_int("intermediate_size");
  d.n_vocab = c.get_int("vocab_size");
  d.n_ctx_train = c.get_int_or("max_position_embeddings", 2048);
  require_positive(c, {{"hidden_size", d.n_embd},
                       {"num_hidden_layers", d.n_layer},
                       {"num_attention_heads", d.n_head},
                       {"num_key_value_heads", d.n_head_kv},
                       {"head_dim", d.head_dim},
                       {"intermediate_size", d.n_ff},
                       {"vocab_size", d.n_vocab}});
  require_head_grouping(c, d.n_head, d.n_head_kv);

  const bool gemma = type == "gemma" || type == "gemma2" || type == "gemma3_text";
  d.norm_eps = float(c.get_float_or("rms_norm_eps", 1e-6));
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
    d.embed_scale = float(c.get_float_or("embedding_multiplier", 1.0));
    d.residual_scale = float(c.get_float_or("residual_multiplier", 1.0));
    d.logits_scale = float(1.0 / c.get_float_or("logits_scaling", 1.0));
  }
  d.attn_scale = 1.0f / std::sqrt(float(d.head_dim));
  if (type == "gemma2" || type == "gemma3_text")
    d.attn_scale =
        float(1.0 / std::sqrt(c.get_float_or("query_pre_attn_scalar", double(d.head_dim))));
  if (type == "granite") d.attn_scale = float(c.get_float_or("attention_multiplier", d.attn_scale));
  d.attn_softcap = float(c.get_float_or("attn_logit_softcapping", 0.0));
  d.final_softcap = float(c.get_float_or("final_logit_softcapping", 0.0));

  const auto types = layer_types(c, type, d.n_layer);
  const int64_t window = c.get_int_or("sliding_window", 0);
  const double partial = c.get_float_or("partial_rotary_factor", 1.0);
  d.ropes.push_back(rope_spec_from_config(c, "full_attention", int(d.head_dim), partial));
  const bool distinct_local_rope = c.raw().contains("rope_local_base_freq") ||
                                   (c.raw().contains("rope_parameters") &&
                                    c.raw()["rope_parameters"].contains("sliding_attention"));
  if (distinct_local_rope)
    d.ropes.push_back(rope_spec_from_config(c, "sliding_attention", int(d.head_dim), partial));
  for (int64_t i = 0; i < d.n_layer; ++i) {
    const bool sliding = types[size_t(i)] == "sliding_attention";
    if (sliding && window <= 0)
      fail("{}: layer {} is a sliding-window layer but sliding_window is not set", c.source(), i);
    d.window.push_back(sliding ? int(window) : 0);
    d.rope_index.push_back(sliding && distinct_local_rope ? 1 : 0);
  }
  d.use_rope.assign(size_t(d.n_layer), true);
  if (type == "smollm3") {
    const auto& raw = c.raw();
    if (raw.contains("no_rope_layers") && raw["no_rope_layers"].is_array()) {
      if (int64_t(raw["no_rope_layers"].size()) != d.n_layer)
        fail("{}: no_rope_layers has {} entries, expected {}", c.source(),
             raw["no_rope_layers"].size(), d.n_layer);
      for (int64_t i = 0; i < d.n_layer; ++i)
        d.use_rope[size_t(i)] = raw["no_rope_layers"][size_t(i)].get<int>() != 0;
    } else {
      const int64_t interval = c.get_int_or("no_rope_layer_interval", 4);
      for (int64_t i = 0; i < d.n_layer; ++i) d.use_rope[size_t(i)] = (i + 1) % interval != 0;
    }
  }
  return d;
}

}  // namespace hearth
