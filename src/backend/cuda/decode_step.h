// The persistent one-token decode step (decode_step.cu): its plain-data arguments, shared by
// the kernel and the backend that fills them (Backend::decode_layers).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common.h"

namespace hearth::cuda {

// One layer, device addresses. Weights bf16 row-major (16-byte aligned); gains of the step's
// gain dtype; q_norm/k_norm null when the model has none. The layer's cache rows are k_off and
// v_off elements into each block of the step's table (StepArgs::kv_blocks; common.h, KvDev).
// A Gated DeltaNet layer (hybrid steps, `linear` 1) has in_qkv/in_z/in_b/in_a instead of
// q/k/v, o its out projection, and its conv and recurrent states (f32, updated in place).
struct StepLayerDev {
  const uint4 *q, *k, *v, *o, *gate, *up, *down;
  const void *attn_norm, *ffn_norm, *q_norm, *k_norm;
  int64_t k_off, v_off;
  const uint4* out_gate;  // attention output gate rows [nh·hd, H], or null
  const uint4 *in_qkv, *in_z, *in_b, *in_a;
  const float *conv_w, *a_log, *dt_bias;  // [K, C], [Hv], [Hv]
  const void* lin_norm;                   // [Dv], of dtype StepArgs::lin_gain_dt
  float *conv_state, *state;              // [K-1, C], [Hv, Dk, Dv]
  int32_t linear;
  int32_t pad_;
};

// Attention splits a head's keys into at most this many chunks, a warp each.
constexpr int kStepMaxChunks = 16;

struct StepArgs {
  const StepLayerDev* layers;  // device array [n_layers]
  int32_t n_layers;
  int32_t H, I, nh, nkv, hd;
  int32_t vec8;  // 16-byte words of the largest phase input: max(H, I, nh·hd) / 8
  int32_t gain_dt;
  int32_t act;
  int32_t stage;        // 1: stage each phase's first weights in shared memory across the barriers
  int32_t kv_prefetch;  // 1: attention's first units prefetch keys/values across the barrier
  int32_t blocks;       // the grid: one block per SM (fewer for tests), all resident at once
  int32_t rot_half;     // rotary_dim / 2 (a multiple of 32; 0: no rope)
  // 1: attention spreads a head's chunks over blocks, the last to finish combining them (heads
  // of 256 past 64 keys and of 128 past 128, more chunks than buffered warps: decode_step.cu).
  int32_t xattn;
  // 1: a llama stack stages the o rows' second batch too, in phase 2's region once the
  // block's attention is done (decode_step.cu, slice2).
  int32_t stage2;
  // Hybrid steps (Qwen3.5): whether layers may be Gated DeltaNet layers, whether attention
  // layers have an output gate, and the Gated DeltaNet shapes (conv taps K, channels C).
  int32_t hybrid, gated;
  int32_t hk, hv, dk, dv, conv_k, conv_c;
  int32_t lin_gain_dt;
  float eps, offset, scale, rope_factor;
  __nv_bfloat16* x;  // [H] residual stream
  // Scratch: q [nh·hd], k and v [nkv·hd], the output gate [nh·hd] (contiguous, in that order:
  // phase 1 writes them as one vector), the mixer's output (attention's or the Gated DeltaNet's,
  // the o product's input) [max(nh·hd, Hv·Dv)], MLP hidden [I]; a Gated DeltaNet layer's
  // products in f32: qkv [C], z [Hv·Dv], b [Hv], a [Hv] (contiguous).
  __nv_bfloat16 *q, *k, *v, *og, *attn, *h;
  float* lin;
  // Cross-block attention (xattn): the chunks' partials [nh][kStepMaxChunks][hd + 2] f32, and
  // each head's count of finished chunks [nh] (zero between layers: the last resets it).
  float* xpart;
  int32_t* head_count;
  unsigned long long* barrier;  // arrivals at grid barriers; zero before the first launch
  const int32_t* pos_first;     // device [2]: the token's position, the caches' first position
  void* const* kv_blocks;       // device: the block table every attention layer's cache shares
  const float* inv_freq;        // device [hd / 2], or null: no rope
};

// Whether the kernel takes this shape on the current device (head_dim 64 or 128, or 128 or 256
// in a hybrid step; Gated DeltaNet heads with 2·Dk + Dv ≤ 512 and Dv/4 a power of two; one
// block of 512 threads and its shared memory must fit an SM).
bool decode_step_fits(const StepArgs& a);
void decode_step(Ctx& ctx, const StepArgs& a);

}  // namespace hearth::cuda
