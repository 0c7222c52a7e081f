// Qwen35Descriptor from config.json: the layer pattern (layer_types, else
// full_attention_interval), Gated DeltaNet and MoE shapes. What differs between the family's
// model_types is one row each of kQwen35Types. Defaults are those of the transformers config
// classes.
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "models/config_checks.h"
#include "models/qwen3_5.h"

namespace hearth {

namespace {

using nlohmann::json;

struct Qwen35ModelType {
  const char* name;
  // Gated DeltaNet layers, (1 + w) gains, gated attention output, partial rotary. Without them
  // (qwen3_moe) the stack is all attention with plain gains and full rotary.
  bool hybrid = true;
  bool fused_qkvz = false;  // in_proj_qkvz / in_proj_ba grouped per key head
  bool moe = false;         // num_experts > 0 makes the MLPs mixtures of experts
  // Whether the router renormalises its top-k weights: always (Qwen3.5-MoE's config has no
  // switch), else as norm_topk_prob says, with this default.
  bool router_always_renormalises = false;
  bool norm_topk_prob_default = false;
};

const Qwen35ModelType kQwen35Types[] = {
    {.name = "qwen3_5"},
    {.name = "qwen3_5_text"},
    {.name = "qwen3_5_moe", .moe = true, .router_always_renormalises = true},
    {.name = "qwen3_5_moe_text", .moe = true, .router_always_renormalises = true},
    {.name = "qwen3_next", .fused_qkvz = true, .moe = true, .norm_topk_prob_default = true},
    {.name = "qwen3_moe", .hybrid = false, .moe = true},
};

const Qwen35ModelType& qwen3_5_model_type(const ModelConfig& c) {
  for (const Qwen35ModelType& t : kQwen35Types)
    if (c.model_type() == t.name) return t;
  fail("{}: model_type '{}' is not of the Qwen3.5 family", c.source(), c.model_type());
}

// The value of `key` in the text config, or nullptr when absent or null.
const json* find_field(const ModelConfig& c, const std::string& key) {
  auto it = c.raw().find(key);
  return it == c.raw().end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

const std::vector<std::string>& qwen3_5_model_types() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> names;
    for (const Qwen35ModelType& t : kQwen35Types) names.push_back(t.name);
    return names;
  }();
  return types;
}

int64_t Qwen35Descriptor::n_full_layers() const {
  return int64_t(std::count(linear_layer.begin(), linear_layer.end(), false));
}

Qwen35Descriptor qwen3_5_descriptor_from_config(const ModelConfig& c) {
  using namespace config_limits;
  const Qwen35ModelType& type = qwen3_5_model_type(c);
  const bool hybrid = type.hybrid;
  Qwen35Descriptor d;
  static_cast<AttentionDims&>(d) = read_attention_dims(c);
  d.model_type = c.model_type();
  d.n_ff = c.get_int_in_or("intermediate_size", 0, 0, kWidth);  // 0: only MoE layers
  d.norm_eps = float(c.get_float_in_or("rms_norm_eps", 1e-6, 0.0, kFloatMax));
  d.tied_embeddings = c.get_bool_or("tie_word_embeddings", false);
  d.attention_bias = c.get_bool_or("attention_bias", false);
  d.zero_centred_norms = hybrid;
  d.attn_output_gate = hybrid;
  const std::string act = c.get_string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    fail("{}: hidden_act '{}' is not supported (silu)", c.source(), act);

  // Layer pattern.
  d.linear_layer.assign(size_t(d.n_layer), false);
  if (hybrid) {
    if (const json* list = layer_list(c, "layer_types", d.n_layer)) {
      for (size_t i = 0; i < d.linear_layer.size(); ++i) {
        const json& v = (*list)[i];
        if (!v.is_string() || (v != "linear_attention" && v != "full_attention"))
          c.fail_field(fmt::format("{}[{}]", c.field_name("layer_types"), i), v,
                       "\"linear_attention\" or \"full_attention\"");
        d.linear_layer[i] = v == "linear_attention";
      }
    } else {
      const int64_t interval = c.get_int_in_or("full_attention_interval", 4, 1, INT64_MAX);
      for (int64_t i = 0; i < d.n_layer; ++i) d.linear_layer[size_t(i)] = (i + 1) % interval != 0;
    }
    d.lin_k_heads = c.get_int_in_or("linear_num_key_heads", 16, 1, kHeads);
    d.lin_v_heads = c.get_int_in_or("linear_num_value_heads", 32, 1, kHeads);
    d.lin_k_dim = c.get_int_in_or("linear_key_head_dim", 128, 1, kHeadDim);
    d.lin_v_dim = c.get_int_in_or("linear_value_head_dim", 128, 1, kHeadDim);
    d.conv_kernel = c.get_int_in_or("linear_conv_kernel_dim", 4, 1, kConvKernel);
    if (d.lin_v_heads % d.lin_k_heads != 0)
      fail("{}: {} ({}) is not a multiple of {} ({})", c.source(),
           c.field_name("linear_num_value_heads"), d.lin_v_heads,
           c.field_name("linear_num_key_heads"), d.lin_k_heads);
    d.fused_qkvz = type.fused_qkvz;
  }

  // MLP: MoE where transformers builds a sparse block.
  d.moe_layer.assign(size_t(d.n_layer), false);
  const std::string experts_key = c.has("num_experts") ? "num_experts" : "num_local_experts";
  const int64_t n_expert = c.get_int_in_or(experts_key, 0, 0, kExperts);  // 0: dense
  if (type.moe && n_expert > 0) {
    // Layers listed in mlp_only_layers keep a dense MLP.
    std::vector<bool> mlp_only(size_t(d.n_layer), false);
    if (const json* list = find_field(c, "mlp_only_layers")) {
      if (!list->is_array())
        c.fail_field(c.field_name("mlp_only_layers"), *list, "a list of layer indices");
      for (size_t i = 0; i < list->size(); ++i) {
        const json& v = (*list)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= d.n_layer)
          c.fail_field(fmt::format("{}[{}]", c.field_name("mlp_only_layers"), i), v,
                       fmt::format("a layer index in [0, {})", d.n_layer));
        mlp_only[size_t(v.get<int64_t>())] = true;
      }
    }
    const int64_t step = c.get_int_in_or("decoder_sparse_step", 1, 1, INT64_MAX);
    for (int64_t i = 0; i < d.n_layer; ++i)
      d.moe_layer[size_t(i)] = !mlp_only[size_t(i)] && (i + 1) % step == 0;
    d.moe.n_embd = d.n_embd;
    d.moe.n_expert = n_expert;
    // Each token's top-k experts are picked among num_experts.
    d.moe.n_expert_used = c.get_int("num_experts_per_tok");
    if (d.moe.n_expert_used < 1 || d.moe.n_expert_used > n_expert)
      c.fail_field(c.field_name("num_experts_per_tok"), c.raw()["num_experts_per_tok"],
                   fmt::format("an integer in [1, {}] ({} = {})", n_expert,
                               c.field_name(experts_key), n_expert));
    d.moe.n_ff_expert = c.get_int_in("moe_intermediate_size", 1, kWidth);
    d.moe.n_ff_shared =
        c.get_int_in_or("shared_expert_intermediate_size", 0, 0, kWidth);  // 0: none
    d.moe.shared_expert_gate = d.moe.n_ff_shared > 0;
    d.moe.norm_topk_prob = type.router_always_renormalises ||
                           c.get_bool_or("norm_topk_prob", type.norm_topk_prob_default);
  }
  for (int64_t i = 0; i < d.n_layer; ++i)
    if (!d.moe_layer[size_t(i)] && d.n_ff <= 0)
      fail("{}: layer {} has a dense MLP but {} is not set", c.source(), i,
           c.field_name("intermediate_size"));

  d.rope = rope_spec_from_config(c, "full_attention", int(d.head_dim), hybrid ? 0.25 : 1.0);
  if (d.rope.type == "dynamic")
    fail("{}: dynamic rope is not supported for {}", c.source(), d.model_type);
  check_kv_cache_size(c, d, d.n_full_layers());
  return d;
}

}  // namespace hearth
