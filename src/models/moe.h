// The mixture-of-experts feed-forward block shared by Qwen3-MoE, Qwen3-Next and Qwen3.5-MoE (and
// meant for other MoE families): f32 softmax router, top-k, optional renormalisation of the k
// weights (norm_topk_prob), only the selected experts computed, tokens grouped by expert (gather
// the rows routed to an expert, one matmul per projection with those rows, scatter-add the
// weighted outputs), and an optional shared expert scaled by sigmoid(shared_expert_gate · x).
// Expert weights come in three checkpoint layouts, all taken as views without copies (one
// expert's matrix is a contiguous slice of a stacked tensor):
//   per expert   experts.{e}.{gate,up,down}_proj.weight        [I, H] / [H, I]
//   fused        experts.gate_up_proj [E, 2I, H] (gate rows first) + experts.down_proj [E, H, I]
//   MLX stacked  switch_mlp.{gate,up,down}_proj.weight         [E, I, H] / [E, H, I]
// Stacked tensors may be packed (mlx-community's quantized MoE checkpoints: codes [E, out, ..],
// scales and biases [E, out, in / group]; trellis too): each expert is then a 2-D packed slice.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/device_buffer.h"
#include "loader/weight_store.h"

namespace hearth {

struct MoeShape {
  int64_t n_embd = 0;
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_expert = 0;
  int64_t n_ff_shared = 0;  // 0: no shared expert
  bool norm_topk_prob = false;
  bool shared_expert_gate = false;  // sigmoid gate on the shared expert (Qwen3-Next, Qwen3.5-MoE)
  Activation act = Activation::Silu;
};

struct MoeWeights {
  Tensor router;                               // [E, H]
  std::vector<Tensor> gate, up, down;          // per expert: [I, H], [I, H], [H, I]
  Tensor shared_gate, shared_up, shared_down;  // [Is, H], [Is, H], [H, Is]
  Tensor shared_expert_gate;                   // [1, H]
  std::string layout;                          // "per-expert", "fused", "switch_mlp"
  // Expert parallelism (a tensor-parallel rank): the experts [held_begin, held_end) it holds
  // and computes (the others' entries are empty), its shared expert a slice of the channels;
  // forward then gives this rank's part of the sum. held_end -1: the whole block.
  int64_t held_begin = 0, held_end = -1;
};

// Takes one layer's MoE tensors under `prefix` (e.g. "model.layers.3.mlp.") in whichever layout
// the checkpoint uses; fails naming the missing tensor or the layouts looked for.
MoeWeights moe_take_weights(WeightStore& store, const std::string& prefix, const MoeShape& shape);

// Scratch for running MoE layers; one per model (forward is not re-entrant). Routing and the
// routed experts are the backend's moe_experts (composed on the CPU, on the device on a GPU).
class MoeBlock {
 public:
  // y[n, H] = MoE(x[n, H]); y is written (not accumulated) and must not alias x.
  void forward(Backend& be, const Tensor& y, const Tensor& x, const MoeWeights& w,
               const MoeShape& shape);
  // Experts computed by the last forward (for bytes-per-token accounting). Exact where the host
  // routes (CPU, GPU prefill); min(E, n·k) where the GPU routes a decode step on the device.
  int64_t last_active_experts() const { return last_active_; }

 private:
  void reserve(Backend& be, int64_t n_tokens, const MoeShape& shape);

  int64_t capacity_ = 0;
  // Routed-expert scratch holds Backend::moe_scratch_rows(n, k) rows; the shared expert's, n rows.
  DeviceBuffer logits_, xg_, gate_, up_, eo_, ids_, wts_, sh_gate_, sh_up_, sh_out_, sh_logit_;
  int64_t last_active_ = 0;
};

}  // namespace hearth
