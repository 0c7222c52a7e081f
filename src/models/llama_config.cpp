// LlamaDescriptor from config.json. Every model_type of the family is read the same way first,
// with llama's defaults (read_shared, read_layers); its entry in kLlamaTypes then says what the
// type changes — the one place per model_type. Defaults are those the Hugging Face config class
// applies when a field is absent.
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

// ---- Activation names --------------------------------------------------------------------------

std::string hidden_act(const ModelConfig& c) { return c.get_string_or("hidden_act", "silu"); }

// Gemma's config classes name it hidden_activation; hidden_act is the fallback.
std::string gemma_activation(const ModelConfig& c) {
  return c.get_string_or("hidden_activation", c.get_string_or("hidden_act", "gelu_pytorch_tanh"));
}

// ---- Sliding layers when config.json has no layer_types -----------------------------------------

// mistral, phi3: every layer once a window is set.
std::vector<bool> all_layers_with_a_window(const ModelConfig& c, int64_t n_layer) {
  return std::vector<bool>(size_t(n_layer), c.has("sliding_window"));
}

// gemma2: layers 0, 2, 4, ... slide.
std::vector<bool> every_other_layer(const ModelConfig&, int64_t n_layer) {
  std::vector<bool> sliding(size_t(n_layer), false);
  for (int64_t i = 0; i < n_layer; ++i) sliding[size_t(i)] = (i + 1) % 2 != 0;
  return sliding;
}

// gemma3: all but every sliding_window_pattern-th layer.
std::vector<bool> all_but_every_nth_layer(const ModelConfig& c, int64_t n_layer) {
  const int64_t pattern = c.get_int_in_or("sliding_window_pattern", 6, 1, INT64_MAX);
  std::vector<bool> sliding(size_t(n_layer), false);
  for (int64_t i = 0; i < n_layer; ++i) sliding[size_t(i)] = (i + 1) % pattern != 0;
  return sliding;
}

// qwen2, smollm3: with use_sliding_window, the layers from max_window_layers on.
std::vector<bool> layers_from_max_window_layers(const ModelConfig& c, int64_t n_layer) {
  std::vector<bool> sliding(size_t(n_layer), false);
  if (c.get_bool_or("use_sliding_window", false) && c.has("sliding_window")) {
    const int64_t from = c.get_int_in_or("max_window_layers", n_layer, 0, INT64_MAX);
    for (int64_t i = from; i < n_layer; ++i) sliding[size_t(i)] = true;
  }
  return sliding;
}

// ---- What each model_type changes ---------------------------------------------------------------

// (1 + w) norm gains, the embedding scaled by √hidden_size, the head tied by default.
void gemma_basics(const ModelConfig& c, LlamaDescriptor& d) {
  d.norm_offset = 1.0f;
  d.tied_embeddings = c.get_bool_or("tie_word_embeddings", true);
  d.embed_scale = std::sqrt(float(d.n_embd));
}

void gemma(const ModelConfig& c, LlamaDescriptor& d) {
  gemma_basics(c, d);
  if (d.act == Activation::Gelu) d.act = Activation::GeluTanh;  // HF Gemma forces the tanh form
}

// Norms on the attention and MLP outputs too (the MLP's input norm has its own name), and the
// attention scaled by query_pre_attn_scalar.
void gemma2(const ModelConfig& c, LlamaDescriptor& d) {
  gemma_basics(c, d);
  d.post_attn_norm = true;
  d.post_ffn_norm = true;
  d.ffn_norm_name = "pre_feedforward_layernorm";
  d.attn_scale =
      float(1.0 / std::sqrt(c.get_float_in_or("query_pre_attn_scalar", double(d.head_dim),
                                              1.0 / kFloatMax, kFloatMax)));
}

void gemma3_text(const ModelConfig& c, LlamaDescriptor& d) {
  gemma2(c, d);
  d.qk_norm = QkNorm::PerHead;
}

// q/k/v biases whatever attention_bias says, and never one on o_proj.
void qwen2(const ModelConfig&, LlamaDescriptor& d) {
  d.qkv_bias = true;
  d.o_bias = false;
}

void qwen3(const ModelConfig&, LlamaDescriptor& d) { d.qk_norm = QkNorm::PerHead; }

void phi3(const ModelConfig&, LlamaDescriptor& d) { d.fused_qkv = d.fused_gate_up = true; }

// Norms after attention and MLP instead of before, and one q/k norm over all heads.
void olmo2(const ModelConfig&, LlamaDescriptor& d) {
  d.qk_norm = QkNorm::Full;
  d.input_norm = false;
  d.pre_ffn_norm = false;
  d.post_attn_norm = true;
  d.post_ffn_norm = true;
}

void granite(const ModelConfig& c, LlamaDescriptor& d) {
  d.embed_scale = float(c.get_float_in_or("embedding_multiplier", 1.0, -kFloatMax, kFloatMax));
  d.residual_scale = float(c.get_float_in_or("residual_multiplier", 1.0, -kFloatMax, kFloatMax));
  // The logits are multiplied by its inverse, which must be a float too.
  d.logits_scale =
      float(1.0 / c.get_float_in_or("logits_scaling", 1.0, 1.0 / kFloatMax, kFloatMax));
  d.attn_scale =
      float(c.get_float_in_or("attention_multiplier", d.attn_scale, -kFloatMax, kFloatMax));
}

// Per-layer rope switch: no_rope_layers (1 = rope, 0 = none), else every
// no_rope_layer_interval-th layer without.
void smollm3(const ModelConfig& c, LlamaDescriptor& d) {
  d.use_rope.assign(size_t(d.n_layer), true);
  if (const json* list = layer_list(c, "no_rope_layers", d.n_layer)) {
    for (size_t i = 0; i < d.use_rope.size(); ++i) {
      const json& v = (*list)[i];
      if (!v.is_number_integer() || (v != 0 && v != 1))
        c.fail_field(fmt::format("{}[{}]", c.field_name("no_rope_layers"), i), v, "0 or 1");
      d.use_rope[i] = v != 0;
    }
    return;
  }
  const int64_t interval = c.get_int_in_or("no_rope_layer_interval", 4, 1, INT64_MAX);
  for (int64_t i = 0; i < d.n_layer; ++i) d.use_rope[size_t(i)] = (i + 1) % interval != 0;
}

// ---- The table ---------------------------------------------------------------------------------

struct LlamaModelType {
  const char* name;
  // What the type changes in a descriptor read with llama's defaults (null: nothing).
  void (*fill)(const ModelConfig& c, LlamaDescriptor& d) = nullptr;
  // The layers that slide when config.json has no layer_types (null: none).
  std::vector<bool> (*default_sliding)(const ModelConfig& c, int64_t n_layer) = nullptr;
  // The activation's name in config.json.
  std::string (*activation)(const ModelConfig& c) = hidden_act;
};

const LlamaModelType kLlamaTypes[] = {
    {.name = "llama"},
    {.name = "mistral", .default_sliding = all_layers_with_a_window},
    {.name = "qwen2", .fill = qwen2, .default_sliding = layers_from_max_window_layers},
    {.name = "qwen3", .fill = qwen3},
    {.name = "gemma", .fill = gemma, .activation = gemma_activation},
    {.name = "gemma2",
     .fill = gemma2,
     .default_sliding = every_other_layer,
     .activation = gemma_activation},
    {.name = "gemma3_text",
     .fill = gemma3_text,
     .default_sliding = all_but_every_nth_layer,
     .activation = gemma_activation},
    {.name = "phi3", .fill = phi3, .default_sliding = all_layers_with_a_window},
    {.name = "olmo2", .fill = olmo2},
    {.name = "granite", .fill = granite},
    {.name = "smollm3", .fill = smollm3, .default_sliding = layers_from_max_window_layers},
};

const LlamaModelType& llama_model_type(const ModelConfig& c) {
  for (const LlamaModelType& t : kLlamaTypes)
    if (c.model_type() == t.name) return t;
  fail("{}: model_type '{}' is not of the llama family", c.source(), c.model_type());
}

// ---- The reading every type shares -------------------------------------------------------------

// Sizes, norms, biases, activation and scales as llama reads them.
void read_shared(const ModelConfig& c, const LlamaModelType& type, LlamaDescriptor& d) {
  static_cast<AttentionDims&>(d) = read_attention_dims(c);
  d.model_type = c.model_type();
  d.n_ff = c.get_int_in("intermediate_size", 1, config_limits::kWidth);
  check_kv_cache_size(c, d, d.n_layer);
  // Scalars the forward casts to float: finite and within float range.
  d.norm_eps = float(c.get_float_in_or("rms_norm_eps", 1e-6, 0.0, kFloatMax));
  d.tied_embeddings = c.get_bool_or("tie_word_embeddings", false);
  d.qkv_bias = d.o_bias = c.get_bool_or("attention_bias", false);
  d.mlp_bias = c.get_bool_or("mlp_bias", false);
  d.act = parse_activation(c, type.activation(c));
  d.attn_scale = 1.0f / std::sqrt(float(d.head_dim));
  d.attn_softcap = float(c.get_float_in_or("attn_logit_softcapping", 0.0, 0.0, kFloatMax));
  d.final_softcap = float(c.get_float_in_or("final_logit_softcapping", 0.0, 0.0, kFloatMax));
}

// Per layer: full or sliding attention (layer_types, else the type's pattern), its window and
// rope (gemma3 rotates sliding layers with their own), rope on every layer.
void read_layers(const ModelConfig& c, const LlamaModelType& type, LlamaDescriptor& d) {
  std::vector<bool> sliding(size_t(d.n_layer), false);
  if (const json* list = layer_list(c, "layer_types", d.n_layer)) {
    for (size_t i = 0; i < sliding.size(); ++i) {
      const json& v = (*list)[i];
      const std::string kind = v.is_string() ? v.get<std::string>() : std::string();
      if (kind != "full_attention" && kind != "sliding_attention")
        c.fail_field(fmt::format("{}[{}]", c.field_name("layer_types"), i), v,
                     "\"full_attention\" or \"sliding_attention\"");
      sliding[i] = kind == "sliding_attention";
    }
  } else if (type.default_sliding) {
    sliding = type.default_sliding(c, d.n_layer);
  }
  d.ropes.push_back(rope_spec_from_config(c, "full_attention", int(d.head_dim), 1.0));
  const json* rope_parameters =
      c.raw().contains("rope_parameters") ? &c.raw()["rope_parameters"] : nullptr;
  const bool distinct_local_rope =
      c.has("rope_local_base_freq") || (rope_parameters && rope_parameters->is_object() &&
                                        rope_parameters->contains("sliding_attention"));
  if (distinct_local_rope)
    d.ropes.push_back(rope_spec_from_config(c, "sliding_attention", int(d.head_dim), 1.0));
  const bool any_sliding = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  // The window sizes a ring per sliding layer and is stored as an int. Where no layer slides,
  // configs often carry any value (or null), so only its type is checked then.
  c.get_int_or("sliding_window", 0);
  const int64_t window =
      any_sliding ? c.get_int_in_or("sliding_window", 0, 1, config_limits::kPositions) : 0;
  for (int64_t i = 0; i < d.n_layer; ++i) {
    const bool slides = sliding[size_t(i)];
    if (slides && window <= 0)
      fail("{}: layer {} is a sliding-window layer but {} is not set", c.source(), i,
           c.field_name("sliding_window"));
    d.window.push_back(slides ? int(window) : 0);
    d.rope_index.push_back(slides && distinct_local_rope ? 1 : 0);
  }
  d.use_rope.assign(size_t(d.n_layer), true);
}

}  // namespace

const std::vector<std::string>& llama_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> names;
    for (const LlamaModelType& t : kLlamaTypes) names.push_back(t.name);
    return names;
  }();
  return types;
}

LlamaDescriptor llama_descriptor_from_config(const ModelConfig& c) {
  const LlamaModelType& type = llama_model_type(c);
  LlamaDescriptor d;
  read_shared(c, type, d);
  read_layers(c, type, d);
  if (type.fill) type.fill(c, d);
  return d;
}

}  // namespace hearth
