#include "models/rotation_support.h"

#include <algorithm>

#include "core/error.h"
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/llama.h"
#include "models/qwen3_5.h"

namespace hearth {

namespace {

bool listed(const std::vector<std::string>& types, const std::string& type) {
  return std::find(types.begin(), types.end(), type) != types.end();
}

// MLX conversions store the Gated DeltaNet conv as [C, K, 1] and the zero-centred gains already
// shifted to 1 + w: the rule qwen3_5_weights.cpp reads the layout by.
bool qwen3_5_mlx_layout(const std::filesystem::path& checkpoint, int64_t kernel) {
  const WeightStore store = WeightStore::open(checkpoint);
  for (const auto& name : store.names()) {
    if (!name.ends_with("linear_attn.conv1d.weight")) continue;
    const auto& s = store.find(name)->shape;
    return s.size() == 3 && s[2] == 1 && s[1] == kernel && kernel > 1;
  }
  return false;
}

}  // namespace

float rotation_norm_offset(const std::filesystem::path& checkpoint) {
  const ModelConfig config = ModelConfig::load(checkpoint);
  const std::string& type = config.model_type();
  if (listed(llama_model_types(), type)) {
    const LlamaDescriptor d = llama_descriptor_from_config(config);
    if (d.post_attn_norm || d.post_ffn_norm || !d.input_norm || !d.pre_ffn_norm)
      fail(
          "--rotate: model_type {} normalises sublayer outputs (post-norms), whose gains cannot "
          "be folded into a linear; it cannot be rotated offline",
          type);
    return d.norm_offset;
  }
  if (listed(qwen3_5_model_types(), type)) {
    const Qwen35Descriptor d = qwen3_5_descriptor_from_config(config);
    if (!d.zero_centred_norms) return 0.0f;
    return qwen3_5_mlx_layout(checkpoint, d.conv_kernel) ? 0.0f : 1.0f;
  }
  fail("--rotate: model_type '{}' is not one hearth runs, so its wiring is unknown", type);
}

}  // namespace hearth
