// Qwen35Descriptor from config.json: the layer pattern (layer_types, else
// full_attention_interval), Gated DeltaNet and MoE shapes, and the switches that make qwen3_moe
// the all-attention variant. Defaults are those of the transformers config classes.
#include <algorithm>

#include "core/error.h"
#include "models/config_checks.h"
#include "models/qwen3_5.h"

namespace hearth {

namespace {

bool is_hybrid(const std::string& type) { return type != "qwen3_moe"; }

}  // namespace

const std::vector<std::string>& qwen3_5_model_types() {
  static const std::vector<std::string> types = {"qwen3_5",          "qwen3_5_text", "qwen3_5_moe",
                                                 "qwen3_5_moe_text", "qwen3_next",   "qwen3_moe"};
  return types;
}

int64_t Qwen35Descriptor::n_full_layers() const {
  return int64_t(std::count(linear_layer.begin(), linear_layer.end(), false));
}

Qwen35Descriptor qwen3_5_descriptor_from_config(const ModelConfig& c) {
  Qwen35Descriptor d;
  const std::string type = c.model_type();
  const bool hybrid = is_hybrid(type);
  d.model_type = type;
  d.n_embd = c.get_int("hidden_size");
  d.n_layer = c.get_int("num_hidden_layers");
  d.n_head = c.get_int("num_attention_heads");
  d.n_head_kv = c.get_int_or("num_key_value_heads", d.n_head);
  d.head_dim = c.get_int_or("head_dim", d.n_head > 0 ? d.n_embd / d.n_head : 0);
  d.n_ff = c.get_int_or("intermediate_size", 0);
  d.n_vocab = c.get_int("vocab_size");
  d.n_ctx_train = c.get_int_or("max_position_embeddings", 2048);
  d.norm_eps = float(c.get_float_or("rms_norm_eps", 1e-6));
  d.tied_embeddings = c.get_bool_or("tie_word_embeddings", false);
  d.attention_bias = c.get_bool_or("attention_bias", false);
  d.zero_centred_norms = hybrid;
  d.attn_output_gate = hybrid;
  const std::string act = c.get_string_or("hidden_act", "silu");
  if (act != "silu" && act != "swish")
    fail("{}: hidden_act '{}' is not supported (silu)", c.source(), act);
  require_positive(c, {{"hidden_size", d.n_embd},
                       {"num_hidden_layers", d.n_layer},
                       {"num_attention_heads", d.n_head},
                       {"num_key_value_heads", d.n_head_kv},
                       {"head_dim", d.head_dim},
                       {"vocab_size", d.n_vocab}});
  require_head_grouping(c, d.n_head, d.n_head_kv);

  // Layer pattern.
  d.linear_layer.assign(size_t(d.n_layer), false);
  if (hybrid) {
    const auto& raw = c.raw();
    if (raw.contains("layer_types") && raw["layer_types"].is_array()) {
      if (int64_t(raw["layer_types"].size()) != d.n_layer)
        fail("{}: layer_types has {} entries, num_hidden_layers is {}", c.source(),
             raw["layer_types"].size(), d.n_layer);
      for (size_t i = 0; i < d.linear_layer.size(); ++i) {
        const auto& v = raw["layer_types"][i];
        const std::string t = v.is_string() ? v.get<std::string>() : "";
        if (t != "linear_attention" && t != "full_attention")
          fail("{}: layer_types[{}] must be \"linear_attention\" or \"full_attention\"", c.source(),
               i);
        d.linear_layer[i] = t == "linear_attention";
      }
    } else {
      const int64_t interval = c.get_int_or("full_attention_interval", 4);
      require_positive(c, {{"full_attention_interval", interval}});
      for (int64_t i = 0; i < d.n_layer; ++i) d.linear_layer[size_t(i)] = (i + 1) % interval != 0;
    }
    d.lin_k_heads = c.get_int_or("linear_num_key_heads", 16);
    d.lin_v_heads = c.get_int_or("linear_num_value_heads", 32);
    d.lin_k_dim = c.get_int_or("linear_key_head_dim", 128);
    d.lin_v_dim = c.get_int_or("linear_value_head_dim", 128);
    d.conv_kernel = c.get_int_or("linear_conv_kernel_dim", 4);
    require_positive(c, {{"linear_num_key_heads", d.lin_k_heads}});
    require_positive(c, {{"linear_num_value_heads", d.lin_v_heads}});
    require_positive(c, {{"linear_key_head_dim", d.lin_k_dim}});
    require_positive(c, {{"linear_value_head_dim", d.lin_v_dim}});
    require_positive(c, {{"linear_conv_kernel_dim", d.conv_kernel}});
    if (d.lin_v_heads % d.lin_k_heads != 0)
      fail("{}: linear_num_value_heads ({}) is not a multiple of linear_num_key_heads ({})",
           c.source(), d.lin_v_heads, d.lin_k_heads);
    d.fused_qkvz = type == "qwen3_next";
  }

  // MLP: MoE where transformers builds a sparse block.
  d.moe_layer.assign(size_t(d.n_layer), false);
  const int64_t n_expert = c.get_int_or("num_experts", c.get_int_or("num_local_experts", 0));
  const bool moe_type = type == "qwen3_next" || type == "qwen3_moe" || type == "qwen3_5_moe_text" ||
                        type == "qwen3_5_moe";
  if (moe_type && n_expert > 0) {
    std::vector<int64_t> mlp_only;
    const auto& raw = c.raw();
    if (raw.contains("mlp_only_layers") && raw["mlp_only_layers"].is_array())
      for (const auto& v : raw["mlp_only_layers"]) mlp_only.push_back(v.get<int64_t>());
    const int64_t step = c.get_int_or("decoder_sparse_step", 1);
    require_positive(c, {{"decoder_sparse_step", step}});
    for (int64_t i = 0; i < d.n_layer; ++i)
      d.moe_layer[size_t(i)] =
          std::find(mlp_only.begin(), mlp_only.end(), i) == mlp_only.end() && (i + 1) % step == 0;
    d.moe.n_embd = d.n_embd;
    d.moe.n_expert = n_expert;
    d.moe.n_expert_used = c.get_int("num_experts_per_tok");
    d.moe.n_ff_expert = c.get_int("moe_intermediate_size");
    d.moe.n_ff_shared = c.get_int_or("shared_expert_intermediate_size", 0);
    d.moe.shared_expert_gate = d.moe.n_ff_shared > 0;
    // Qwen3.5-MoE's router always renormalises (its config has no switch); Qwen3-MoE defaults to
    // not, Qwen3-Next to yes.
    const bool q35 = type == "qwen3_5_moe_text" || type == "qwen3_5_moe";
    d.moe.norm_topk_prob = q35 || c.get_bool_or("norm_topk_prob", type == "qwen3_next");
    require_positive(c, {{"num_experts_per_tok", d.moe.n_expert_used}});
    require_positive(c, {{"moe_intermediate_size", d.moe.n_ff_expert}});
    if (d.moe.n_expert_used > n_expert)
      fail("{}: num_experts_per_tok ({}) exceeds num_experts ({})", c.source(), d.moe.n_expert_used,
           n_expert);
  }
  for (int64_t i = 0; i < d.n_layer; ++i)
    if (!d.moe_layer[size_t(i)] && d.n_ff <= 0)
      fail("{}: layer {} has a dense MLP but intermediate_size is not set", c.source(), i);

  const double partial = c.get_float_or("partial_rotary_factor", hybrid ? 0.25 : 1.0);
  d.rope = rope_spec_from_config(c, "full_attention", int(d.head_dim), partial);
  if (d.rope.type == "dynamic") fail("{}: dynamic rope is not supported for {}", c.source(), type);
  return d;
}

}  // namespace hearth
