// The mixture-of-experts launchers of moe.cu behind CudaBackend::moe_experts: routing on the
// device, the decode-sized expert products that read the routing from device memory (so a decode
// step needs no host round trip and is captured in the step's graph), and the combine that ends
// the grouped prefill path. Launchers only enqueue work on ctx.stream (graph-capturable).
#pragma once
#include "backend/cuda/common.h"

namespace hearth::cuda {

constexpr int64_t kMoeMaxExperts = 512;  // router width: 16 logits per lane of one warp
constexpr int64_t kMoeMaxRouted = 32;    // k a routing warp can hold (a slot per lane)
constexpr int64_t kMoeDecodeTokens = 8;  // n ≤ this: moe_decode
constexpr int64_t kMoeDecodeUsed = 16;   // k ≤ this for moe_decode (n·k ≤ 128 pairs)

// One projection of every expert, as plain data for op records: expert e's matrix is at
// table[e] (device array; experts in separate allocations) when table is set, else at
// base + e·stride bytes (equally strided slices of one stacked tensor).
struct MoeMat {
  const void* base = nullptr;
  const void* const* table = nullptr;
  int64_t stride = 0;
};

bool moe_route_fits(int64_t n_expert, int64_t k);
// ids[t, j] / weights[t, j] ([n, k], I32 / F32): token t's k most probable experts under
// softmax(logits[t]) (f32 [n, E]), best first, ties → lower index; weights are the
// probabilities, over their sum (in slot order) when norm_topk_prob.
void moe_route(Ctx& ctx, const Ten& logits, const Ten& ids, const Ten& weights,
               int32_t norm_topk_prob);

// Whether moe_decode takes x [n, H] and the hidden scratch h [n·k, I]: n ≤ 8, k ≤ 16, bf16,
// H and I multiples of 8, 16-byte aligned. The expert matrices must be bf16 and 16-byte aligned
// (the caller checks them).
bool moe_decode_fits(const Ten& x, const Ten& h, int64_t k);
// y[t] = Σ_j weights[t, j] · down_e(act(gate_e · x_t) ⊙ (up_e · x_t)), e = ids[t, j], in two
// launches: h (bf16 [n·k, I]) per (token, slot) pair, then the down products summed over the
// slots, rounded to y's dtype once.
void moe_decode(Ctx& ctx, const Ten& y, const Ten& x, const Ten& ids, const Ten& weights,
                const MoeMat& gate, const MoeMat& up, const MoeMat& down, const Ten& h,
                int32_t act);

// y[t] = Σ_j weights[t, j] · o[pos[t, j]] in slot order (the grouped path's expert outputs o,
// one row per pair; pos is device memory, [n, k]).
void moe_combine(Ctx& ctx, const Ten& y, const Ten& o, const int32_t* pos, const Ten& weights);

}  // namespace hearth::cuda
