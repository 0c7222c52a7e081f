// The llama family: one config-driven decoder for llama, mistral, qwen2, qwen3, gemma, gemma2,
// gemma3_text (and gemma3's text weights), phi3, olmo2, granite and smollm3 (kLlamaTypes in
// llama_config.cpp). A LlamaDescriptor says how one model_type wires the shared blocks;
// checkpoint quirks (name prefixes, fused projections) are resolved at load, so the forward pass
// has no per-family branches beyond the descriptor's switches.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/config_checks.h"
#include "models/model.h"
#include "models/rope.h"
#include "models/tensor_parallel.h"

namespace hearth {

enum class QkNorm : uint8_t { None, PerHead, Full };

// The sizes (n_embd, n_layer, heads, head_dim, n_vocab, n_ctx_train) are AttentionDims'.
struct LlamaDescriptor : AttentionDims {
  std::string model_type;
  int64_t n_ff = 0;
  float norm_eps = 1e-6f;
  float norm_offset = 0.0f;  // 1 for gemma's (1 + w) norms
  bool tied_embeddings = false;
  bool qkv_bias = false, o_bias = false, mlp_bias = false;
  QkNorm qk_norm = QkNorm::None;
  bool input_norm = true;       // pre-attention norm (olmo2 has none)
  bool post_attn_norm = false;  // norm on the attention output (gemma2/3, olmo2)
  bool pre_ffn_norm = true;     // norm before the MLP
  bool post_ffn_norm = false;   // norm on the MLP output (gemma2/3, olmo2)
  std::string ffn_norm_name = "post_attention_layernorm";
  std::string post_attn_norm_name = "post_attention_layernorm";
  bool fused_qkv = false, fused_gate_up = false;  // phi3
  Activation act = Activation::Silu;
  float embed_scale = 1.0f;
  float residual_scale = 1.0f;  // granite residual_multiplier
  float attn_scale = 0.0f;
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  float logits_scale = 1.0f;    // multiplies the logits (granite: 1 / logits_scaling)
  std::vector<int> window;      // per layer, 0 = full attention
  std::vector<bool> use_rope;   // per layer (smollm3's no-rope layers)
  std::vector<int> rope_index;  // per layer: which of `ropes` it uses
  std::vector<RopeSpec> ropes;
};

LlamaDescriptor llama_descriptor_from_config(const ModelConfig& config);
std::unique_ptr<Model> make_llama_model(const ModelConfig& config, WeightStore weights,
                                        std::unique_ptr<Backend> backend,
                                        const LoadOptions& options = {});
// One rank of a tensor-parallel llama-family model (tensor_parallel.h): its shard of every
// weight, read from `weights` (the whole checkpoint).
std::unique_ptr<Model> make_llama_rank_model(const ModelConfig& config, WeightStore weights,
                                             std::unique_ptr<Backend> backend,
                                             const TensorShard& shard);
// Throws, naming the numbers, unless the model can be split over `world` ranks: query heads and
// intermediate_size divisible by it, KV heads divisible by it or it by them (vLLM's rule).
void check_llama_tensor_parallel(const LlamaDescriptor& d, int world);
// The model_types of the family, in the order of its table.
const std::vector<std::string>& llama_model_types();

}  // namespace hearth
