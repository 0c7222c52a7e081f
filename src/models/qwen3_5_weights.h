// Qwen3.5-family weights after checkpoint normalisation: canonical names resolved, vision tensors
// skipped, MTP tensors kept, fused / interleaved projections re-laid into plain row blocks and
// small tensors converted to f32. Every tensor has been through Backend::prepare_weight; on the CPU
// that is the host view itself, so the WeightStore (mappings) and `owned` (converted host copies)
// must outlive these weights.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "loader/weight_store.h"
#include "models/model_common.h"
#include "models/moe.h"
#include "models/qwen3_5.h"

namespace hearth {

struct Qwen35Layer {
  Tensor attn_norm, ffn_norm;  // [H]
  // Full attention (query and gate are separate row blocks after load).
  Linear q, gate, k, v, o;
  Tensor q_norm, k_norm;  // [head_dim]
  // Gated DeltaNet.
  Tensor in_qkv, in_z, in_b, in_a, out_proj;  // [C, H], [Hv·Dv, H], [Hv, H], [Hv, H], [H, Hv·Dv]
  Tensor conv_w;                              // [K, C] f32 (owned, transposed)
  // (A tensor-parallel rank holds its heads' rows, channels and columns of these.)
  Tensor a_log, dt_bias;  // [Hv] f32 (owned)
  Tensor lin_norm;        // [Dv] plain gain
  // MLP.
  Tensor mlp_gate, mlp_up, mlp_down;
  MoeWeights moe;
};

struct Qwen35Weights {
  Tensor embed, final_norm, lm_head;
  std::vector<Qwen35Layer> layers;
  // Offset added to the input/post/final/q/k gains: 1 for zero-centred gains stored as w (HF),
  // 0 when the checkpoint stores them shifted (MLX conversions) or they are plain (qwen3_moe).
  float norm_offset = 0.0f;
  bool mlx_layout = false;
  std::map<std::string, Tensor> mtp;  // mtp.* tensors, kept for speculative decoding
  std::vector<Buffer> owned;
};

// `shard` says which part a tensor-parallel rank keeps (qwen3_5_shard(d, 0, 1): everything).
Qwen35Weights qwen3_5_load_weights(WeightStore& store, const Qwen35Descriptor& d,
                                   const Qwen35Shard& shard, Backend& backend);

}  // namespace hearth
