// The Gated DeltaNet mixer for the one-kernel decode step of a hybrid stack (decode_step.cu,
// phase 2 of a linear-attention layer): a block per value head. Device code only.
//
// Why a block per value head, where gated_delta_mixer.cu gives a block a 32-column slab: here
// the head's state [Dk, Dv] f32 (64 KB on the 9B) is requested into shared memory while the
// block waits at the grid barrier that ends phase 1 (it depends on nothing the step computes),
// so its read is off the critical path, and a whole head in one block needs no cross-block sum
// for the gated norm. What is left after the barrier is the conv of the head's 2·Dk + Dv
// channels (one per thread), four block reductions and two passes over the state in shared
// memory; the new state stays there and goes back to memory after the next phase's products
// (state_write_back), off the critical path.
//
// Code size: the step's kernel is large (146–212 KB of code) and this runs once per layer, so
// its instructions come in cold (clock marks: attention's code took 3–4 times
// as long on its first run in a layer as on its second), so its loops over the state stay
// rolled. Rolled together with V read four rows at a time, they moved spills into the products
// and cost 7 %; rolled with the attention's
// score row unrolled by 8 / 4 words (fewer spills): 9B 222.8–223.8 → 225.4 t/s (one machine).
//
// Numerics: the expressions of gated_delta_mixer.cu (conv_token, the gates, the delta rule,
// the gated norm), in f32; only summation orders differ. The products arrive in f32 (phase 1
// stores f32 for these rows, as the per-op path's scratch is f32), and the gated norm's output
// is rounded to bf16 for the out projection, as the per-op path stores it.
#pragma once
#include "backend/cuda/decode_step.h"
#include "backend/cuda/decode_step_attention.cuh"
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda::step {

constexpr int kMixThreads = 512;  // the step's block
constexpr int kMaxTaps = 4;

// Bytes of shared memory the mixer takes: the state [Dk·Dv], the conv outputs q [Dk], k [Dk],
// v [Dv], two reduction buffers [row lanes][Dv] (a float4 per thread each; from phase 2's end
// to phase 3's end they hold the conv shift's rows, conv_rows_smem) and the block sums'
// partials [2][32], f32.
__host__ __device__ constexpr size_t mixer_smem_bytes(int dk, int dv) {
  return size_t(dk) * size_t(dv) * 4 + size_t(2 * dk + dv) * 4 + 2 * size_t(kMixThreads) * 16 +
         64 * 4;
}

// The channel of the conv thread j of value head h: q channels of its key head (j < Dk), then
// its k channels, then the head's own v channels; -1 past them.
__device__ __forceinline__ int mix_channel(const StepArgs& a, int h, int j) {
  const int kh = h / (a.hv / a.hk);
  if (j < a.dk) return kh * a.dk + j;
  if (j < 2 * a.dk) return (a.hk + kh) * a.dk + j - a.dk;
  if (j < 2 * a.dk + a.dv) return 2 * a.hk * a.dk + h * a.dv + j - 2 * a.dk;
  return -1;
}

// What the mixer of head h reads that the step does not compute, for this thread: its conv
// channel's taps and weights, the head's gate constants and (threads of row lane 0) the gated
// norm's gains of their column quad. Gathered before the barrier wait.
struct MixConsts {
  float tap[kMaxTaps - 1], w[kMaxTaps];
  float a_log, dt_bias;
  float gw[4];
};
__device__ __forceinline__ void load_mix_consts(const StepArgs& a, const StepLayerDev& L, int h,
                                                MixConsts& m) {
  const int c = mix_channel(a, h, threadIdx.x);
#pragma unroll
  for (int r = 0; r < kMaxTaps; ++r) {
    if (r < kMaxTaps - 1)
      m.tap[r] = c >= 0 && r < a.conv_k - 1 ? L.conv_state[int64_t(r) * a.conv_c + c] : 0.0f;
    m.w[r] = c >= 0 && r < a.conv_k ? L.conv_w[int64_t(r) * a.conv_c + c] : 0.0f;
  }
  m.a_log = L.a_log[h];
  m.dt_bias = L.dt_bias[h];
  const int nq4 = a.dv / 4, col = 4 * (int(threadIdx.x) % nq4);
  const bool finisher = int(threadIdx.x) < nq4;
#pragma unroll
  for (int e = 0; e < 4; ++e) m.gw[e] = finisher ? ld(L.lin_norm, a.lin_gain_dt, col + e) : 0.0f;
}

// Asks the L2 for head h's state (the block's threads, a 128-byte line each), at the start of
// the layer, so that prefetch_state's copies at the barrier find it there.
__device__ __forceinline__ void state_to_l2(const StepArgs& a, const StepLayerDev& L, int h) {
  const char* src = reinterpret_cast<const char*>(L.state + int64_t(h) * a.dk * a.dv);
  const int lines = a.dk * a.dv * 4 / 128;
  for (int i = threadIdx.x; i < lines; i += blockDim.x)
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(src + i * 128));
}

// Requests head h's state [Dk, Dv] into S (cp.async, one commit group; the block's threads).
__device__ __forceinline__ void prefetch_state(const StepArgs& a, const StepLayerDev& L, int h,
                                               float* S) {
  const int n16 = a.dk * a.dv / 4;
  const float* src = L.state + int64_t(h) * a.dk * a.dv;
  for (int i = threadIdx.x; i < n16; i += blockDim.x)
    copy16_async(reinterpret_cast<uint4*>(S) + i, src + 4 * i, true);
  copy16_commit();
}

// Two sums over the block at once (every thread gets both); `part` [2][32] in shared memory.
__device__ __forceinline__ float2 block_sum2(float x, float y, float* part) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  x = warp_sum(x);
  y = warp_sum(y);
  __syncthreads();  // part may still be read by a previous call
  if (lane == 0) {
    part[warp] = x;
    part[32 + warp] = y;
  }
  __syncthreads();
  return make_float2(warp_sum(lane < n_warps ? part[lane] : 0.0f),
                     warp_sum(lane < n_warps ? part[32 + lane] : 0.0f));
}

// Sums the per-row-lane partials red[rl][quad] over the row lanes, in order.
__device__ __forceinline__ float4 sum_row_lanes(const float4* red, int nrl, int nq4, int quad) {
  float4 s = red[quad];
#pragma unroll 1
  for (int r = 1; r < nrl; ++r) {
    const float4 p = red[r * nq4 + quad];
    s.x += p.x;
    s.y += p.y;
    s.z += p.z;
    s.w += p.w;
  }
  return s;
}

// Value head h's mixer (the whole block): conv + SiLU of its channels, the gates, the delta
// rule on its state (S in shared memory: prefetched when `prefetched`, else requested here),
// and the gated RMSNorm of its output into a.attn[h·Dv ...] (bf16). The new state goes back to
// L.state now when `write_back`, else it stays in S for state_write_back, off the critical
// path (the block's last head: its 64 KB of stores would hold up the barrier's release).
// `mix`: mixer_smem_bytes of shared memory.
__device__ void mixer_head(const StepArgs& a, const StepLayerDev& L, int h, float* mix,
                           const MixConsts& m, bool prefetched, bool write_back) {
  const int tid = threadIdx.x, dk = a.dk, dv = a.dv, C = a.conv_c, VD = a.hv * a.dv;
  float* const S = mix;
  float* const qv = S + dk * dv;
  float* const kv = qv + dk;
  float* const vv = kv + dk;
  float4* const red = reinterpret_cast<float4*>(vv + dv);  // 16-byte aligned: dk, dv % 4 == 0
  float4* const red2 = red + kMixThreads;
  float* const part = reinterpret_cast<float*>(red2 + kMixThreads);
  if (!prefetched) prefetch_state(a, L, h, S);
  const int nq4 = dv / 4, quad = tid % nq4, rl = tid / nq4, nrl = kMixThreads / nq4;
  const int col = 4 * quad;
  const bool finisher = rl == 0;
  // Everything this head reads from phase 1's products, requested together.
  const int c = mix_channel(a, h, tid);
  const float xin = c >= 0 ? __ldcg(a.lin + c) : 0.0f;
  const float b_in = __ldcg(a.lin + C + VD + h), za = __ldcg(a.lin + C + VD + a.hv + h);
  float z[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) z[e] = finisher ? __ldcg(a.lin + C + h * dv + col + e) : 0.0f;

  // conv + SiLU (conv_token's arithmetic), then the q and k sums of squares.
  float y = 0.0f;
  if (c >= 0) {
    float acc = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxTaps; ++r)
      if (r < a.conv_k) acc += m.w[r] * (r < a.conv_k - 1 ? m.tap[r] : xin);
    y = acc * sigmoid_f(acc);
    (tid < dk ? qv : tid < 2 * dk ? kv - dk : vv - 2 * dk)[tid] = y;
  }
  // The gates (gates_kernel).
  const float zs = za + m.dt_bias;
  const float sp = zs > 20.0f ? zs : log1pf(expf(zs));
  const float decay = expf(-expf(m.a_log) * sp);
  const float bt = sigmoid_f(b_in);
  copy16_wait_all();  // this thread's state copies; block_sum2's barriers show everyone's
  const float2 ss =
      block_sum2(tid < dk ? y * y : 0.0f, tid >= dk && tid < 2 * dk ? y * y : 0.0f, part);
  // L2 norms with eps 1e-6 inside the sqrt, q scaled by Dk^-1/2 (as gated_delta_kernel).
  const float iq = rsqrtf(ss.x + 1e-6f) * rsqrtf(float(dk)), ik = rsqrtf(ss.y + 1e-6f);

  // Delta rule: S ← e^g·S; mem = Sᵀk; δ = β(v − mem); S += k δᵀ; o = Sᵀq. Thread (rl, quad)
  // takes rows rl, rl + nrl, ... of columns col..col+3. The loops stay rolled (less code to
  // come in cold; measured with the score row's shorter unroll).
  float4* const S4 = reinterpret_cast<float4*>(S);
  float4 mem = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
  for (int i = rl; i < dk; i += nrl) {
    float4 s = S4[i * nq4 + quad];
    s.x *= decay;
    s.y *= decay;
    s.z *= decay;
    s.w *= decay;
    S4[i * nq4 + quad] = s;
    add_scaled4(mem, s, kv[i], ik);
  }
  red[tid] = mem;  // = red[rl * nq4 + quad]
  __syncthreads();
  mem = sum_row_lanes(red, nrl, nq4, quad);
  const float4 v = *reinterpret_cast<const float4*>(vv + col);
  const float4 delta =
      make_float4(bt * (v.x - mem.x), bt * (v.y - mem.y), bt * (v.z - mem.z), bt * (v.w - mem.w));
  float4 out = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4* const Sg = reinterpret_cast<float4*>(L.state + int64_t(h) * dk * dv);
#pragma unroll 1
  for (int i = rl; i < dk; i += nrl) {
    float4 s = S4[i * nq4 + quad];
    const float kk = kv[i];
    s.x = s.x + kk * ik * delta.x;
    s.y = s.y + kk * ik * delta.y;
    s.z = s.z + kk * ik * delta.z;
    s.w = s.w + kk * ik * delta.w;
    if (write_back)
      Sg[i * nq4 + quad] = s;
    else
      S4[i * nq4 + quad] = s;
    add_scaled4(out, s, qv[i], iq);
  }
  red2[tid] = out;
  __syncthreads();
  // The gated norm: y = o · rsqrt(mean(o²) + eps) · w · silu(z) (no weight offset).
  float o4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (finisher) {
    const float4 o = sum_row_lanes(red2, nrl, nq4, quad);
    o4[0] = o.x;
    o4[1] = o.y;
    o4[2] = o.z;
    o4[3] = o.w;
  }
  const float sso =
      block_sum2(o4[0] * o4[0] + o4[1] * o4[1] + o4[2] * o4[2] + o4[3] * o4[3], 0.0f, part).x;
  if (finisher) {
    const float inv = rsqrtf(sso / float(dv) + a.eps);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      a.attn[h * dv + col + e] = __float2bfloat16(o4[e] * inv * m.gw[e] * silu_f(z[e]));
  }
}

// Head h's new state from S (mixer_head without write_back) to L.state. Run after the grid
// barrier that ends phase 2 (the block's threads; S untouched since).
__device__ __forceinline__ void state_write_back(const StepArgs& a, const StepLayerDev& L, int h,
                                                 const float* S) {
  const int n16 = a.dk * a.dv / 4;
  float4* dst = reinterpret_cast<float4*>(L.state + int64_t(h) * a.dk * a.dv);
  const float4* src = reinterpret_cast<const float4*>(S);
  for (int i = threadIdx.x; i < n16; i += blockDim.x) dst[i] = src[i];
}

// Head h's conv state after this token: rows 1..K-2 move up, the token's input (phase 1's
// product) is last. The block stores it after the grid barrier that ends phase 2, when every
// block that read the old state has (the q/k channels are shared by the key head's value heads
// and written by the first of them, the v channels by their own head). What it stores is
// requested while the block waits at that barrier (the old rows 1..K-2 and the input: nothing
// the block writes before it stores them) into the mixer's reduction buffers, free once the
// mixer is done, so that phase 3 ends in stores only. (That phase's slowest block was a mixer
// block, ~2.5 µs behind the median; clock marks showed all 32 mixer
// blocks that late, from the shift's dependent loads and the stores after their products. With
// the rows requested at the barrier: the phase's slowest block 11.0 → 9.3 µs, the 9B +0.5 %
// tokens/s; docs/cuda.md.)
__device__ __forceinline__ float4* conv_rows_smem(const StepArgs& a, float* mix, int slot) {
  return reinterpret_cast<float4*>(mix + a.dk * a.dv + 2 * a.dk + a.dv) +
         slot * (2 * a.dk + a.dv) / 4 * (a.conv_k - 1);
}
// Whether `heads` heads' rows fit those buffers (2 · kMixThreads 16-byte words).
__host__ __device__ inline bool conv_rows_fit(const StepArgs& a, int heads) {
  return heads * (2 * a.dk + a.dv) / 4 * (a.conv_k - 1) <= 2 * kMixThreads;
}
// Channels go four at a time (dk, dv % 4 == 0, so four channels are contiguous in a row).
// Whether value head h shifts its quad q: the q and k channels belong to its key head, whose
// first value head shifts them (first_of_key_head).
__device__ __forceinline__ bool shifts_quad(const StepArgs& a, bool first_of_key_head, int q) {
  return first_of_key_head || 4 * q >= 2 * a.dk;
}
__device__ __forceinline__ void conv_rows_request(const StepArgs& a, const StepLayerDev& L, int h,
                                                  float4* buf) {
  const int n4 = (2 * a.dk + a.dv) / 4;
  const bool first_of_key_head = h % (a.hv / a.hk) == 0;
  for (int q = threadIdx.x; q < n4; q += blockDim.x) {
    if (!shifts_quad(a, first_of_key_head, q)) continue;
    const int c = mix_channel(a, h, 4 * q);
    for (int r = 0; r + 1 < a.conv_k; ++r) {
      const float* src =
          r + 2 < a.conv_k ? L.conv_state + int64_t(r + 1) * a.conv_c + c : a.lin + c;
      copy16_async(reinterpret_cast<uint4*>(buf + r * n4 + q), src, true);
    }
  }
  copy16_commit();
}
// The shifted rows to L.conv_state (each thread stores what it requested).
__device__ __forceinline__ void conv_rows_store(const StepArgs& a, const StepLayerDev& L, int h,
                                                const float4* buf) {
  const int n4 = (2 * a.dk + a.dv) / 4;
  const bool first_of_key_head = h % (a.hv / a.hk) == 0;
  copy16_wait_all();
  for (int q = threadIdx.x; q < n4; q += blockDim.x) {
    if (!shifts_quad(a, first_of_key_head, q)) continue;
    const int c = mix_channel(a, h, 4 * q);
    for (int r = 0; r + 1 < a.conv_k; ++r)
      *reinterpret_cast<float4*>(L.conv_state + int64_t(r) * a.conv_c + c) = buf[r * n4 + q];
  }
}

}  // namespace hearth::cuda::step
