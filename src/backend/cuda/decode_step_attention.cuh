// Attention for the one-kernel decode step (decode_step.cu, phase 2): a warp per chunk of keys of
// a query head, the head's chunks in one block, with the q/k norm, rope and cache store of the
// new token, and the small helpers the step's other phases use too. Device code only, in its own
// file to keep the step's kernel file about the phases and the barriers.
#pragma once
#include <cuda_bf16.h>

#include <cstring>
#include <type_traits>

#include "backend/cuda/decode_step.h"
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda::step {

constexpr int kChunkKeys = 32;  // keys per prefetched chunk (one per lane)

// A warp's attention buffer: K rows padded by 16 bytes (a lane reads its own key's row: the
// padding spreads the rows over the banks), then V rows.
__host__ __device__ constexpr int k_stride_bytes(int hd) { return hd * 2 + 16; }
__host__ __device__ constexpr int attn_buf_bytes(int hd) {
  return kChunkKeys * k_stride_bytes(hd) + kChunkKeys * hd * 2;
}

__device__ __forceinline__ float bf(const __nv_bfloat16 v) { return __bfloat162float(v); }

// 16-byte global → shared copy (cp.async, L1 bypassed); `valid` false writes zeros, reads none.
__device__ __forceinline__ void copy16_async(uint4* dst, const void* src, bool valid) {
  const unsigned d = unsigned(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copy16_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void copy16_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

__device__ __forceinline__ float bf_round(float v) { return __bfloat162float(__float2bfloat16(v)); }

// What a chunk's q/k norm and rope take besides the head's vector, for this lane (elements
// lane + 32j): the gains with the offset added, and cos/sin of the rotation at pos with the
// attention factor applied, as qk_norm_rope_store_kernel computes them. None depends on the
// step's products, so the block gathers them before it waits at the barrier ending phase 1:
// the rotation from `rot` (rotation_to_smem, once per step), the gains from memory (asked of
// the L2 at the layer's start, prefetch_gains).
template <int E>
struct HeadConsts {
  float qg[E], kg[E], cs[E / 2], sn[E / 2];  // cs/sn: j < rot_half / 32
};

// The lane's E values of one key's row (E bf16): one load of 4, 8 or 16 bytes.
template <int E>
using VecOf =
    typename std::conditional<E == 8, uint4,
                              typename std::conditional<E == 4, uint2, unsigned>::type>::type;
template <int E>
__device__ __forceinline__ void load_head_consts(const StepArgs& a, const StepLayerDev& L,
                                                 const float* rot, int lane, HeadConsts<E>& c) {
#pragma unroll
  for (int j = 0; j < E; ++j) {
    c.qg[j] = L.q_norm ? ld(L.q_norm, a.gain_dt, lane + 32 * j) + a.offset : 0.0f;
    c.kg[j] = L.k_norm ? ld(L.k_norm, a.gain_dt, lane + 32 * j) + a.offset : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < E / 2; ++j) {
    const bool ok = lane + 32 * j < a.rot_half;
    c.cs[j] = ok ? rot[lane + 32 * j] : 1.0f;
    c.sn[j] = ok ? rot[a.rot_half + lane + 32 * j] : 0.0f;
  }
}

// rot[i] = cos(pos · inv_freq[i]) · factor, rot[half + i] = sin(…) · factor for i < half =
// rotary_dim / 2 (the block's threads; visible after the next block barrier). None without rope.
__device__ __forceinline__ void rotation_to_smem(const StepArgs& a, int pos, float* rot) {
  const int half = a.rot_half;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sn, cs;
    sincosf(float(pos) * a.inv_freq[i], &sn, &cs);
    rot[i] = cs * a.rope_factor;
    rot[half + i] = sn * a.rope_factor;
  }
}

// Asks the L2 to fetch and keep this layer's q/k norm gains (a warp; 128-byte lines), so that
// phase 2's load_head_consts does not wait for HBM behind the staged weights.
__device__ __forceinline__ void prefetch_gains(const StepArgs& a, const StepLayerDev& L, int lane) {
  if (!L.q_norm) return;
  const int lines = (a.hd * (a.gain_dt == kF32 ? 4 : 2) + 127) / 128;
  if (lane < 2 * lines) {
    const char* g = static_cast<const char*>(lane < lines ? L.q_norm : L.k_norm);
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(g + (lane % lines) * 128));
  }
}

// Rotates the pairs (j, j + hj), j < hj, of a lane's elements (rotary_dim = 64·hj), each
// rounded to bf16. hj is matched against each possible value in turn, so that every index is a
// compile-time constant and x stays in registers (a runtime pair index put x in local memory).
// Without PARTIAL only the whole head (hj = E/2) or none.
template <int E, bool PARTIAL, int HJ = E / 2>
__device__ __forceinline__ void rotate_pairs(float (&x)[E], const HeadConsts<E>& c, int hj) {
  if constexpr (HJ > 0) {
    if (hj != HJ) {
      if constexpr (PARTIAL) rotate_pairs<E, PARTIAL, HJ - 1>(x, c, hj);
      return;
    }
#pragma unroll
    for (int j = 0; j < HJ; ++j) {
      const float p = x[j], q = x[j + HJ];
      x[j] = bf_round(p * c.cs[j] - q * c.sn[j]);
      x[j + HJ] = bf_round(q * c.cs[j] + p * c.sn[j]);
    }
  }
}

// One head's vector (a warp; lane l holds elements l + 32j) as qk_norm_rope_store_kernel makes
// it: RMS-normalised with the gains g (none: `norm` false) and rotated over its first rotary_dim
// dims (pairs (j, j + hj) for j < hj = rot_half / 32; no rope: rot_half 0), each rounded to bf16
// where that kernel stores.
template <int E, bool PARTIAL>
__device__ __forceinline__ void norm_rope(const StepArgs& a, float (&x)[E], bool norm,
                                          const float (&g)[E], const HeadConsts<E>& c) {
  const int hd = E * 32;
  if (norm) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < E; ++j) ss += x[j] * x[j];
    const float inv = rsqrtf(warp_sum(ss) / float(hd) + a.eps);
#pragma unroll
    for (int j = 0; j < E; ++j) x[j] = bf_round(x[j] * inv * g[j]);
  }
  rotate_pairs<E, PARTIAL>(x, c, a.rot_half / 32);
}

template <int E>
__device__ __forceinline__ void load_head(const __nv_bfloat16* src, int lane, float (&x)[E]) {
#pragma unroll
  for (int j = 0; j < E; ++j) x[j] = bf(__ldcg(src + lane + 32 * j));
}

// Phase 2's key and value prefetch: requests the cached keys [lo, hi] (at most kChunkKeys) but
// pos into the warp's buffer `buf` (cp.async, one commit group). They depend on nothing this
// step computes, so a warp issues them before it waits at the barrier that ends phase 1.
template <int E>
__device__ void prefetch_kv(const StepArgs& a, const StepLayerDev& L, int g, int lo, int hi,
                            int pos, char* buf, int lane) {
  constexpr int hd = E * 32, words = hd / 8;
  const int64_t row = int64_t(a.nkv) * hd;
  char* vbuf = buf + kChunkKeys * k_stride_bytes(hd);
#pragma unroll 4
  for (int i = lane; i < kChunkKeys * words; i += 32) {
    const int j = i / words, w = i - j * words, p = lo + j;
    const bool ok = p <= hi && p != pos;
    const int64_t col = g * hd + w * 8;
    copy16_async(reinterpret_cast<uint4*>(buf + j * k_stride_bytes(hd) + w * 16),
                 ok ? static_cast<const void*>(kv_row(a.kv_blocks, L.k_off + col, row, p))
                    : static_cast<const void*>(buf),
                 ok);
    copy16_async(reinterpret_cast<uint4*>(vbuf + j * hd * 2 + w * 16),
                 ok ? static_cast<const void*>(kv_row(a.kv_blocks, L.v_off + col, row, p))
                    : static_cast<const void*>(buf),
                 ok);
  }
  copy16_commit();
}

// Phase 2, one chunk of a head (a warp): query head hq over the keys [lo, hi], at most
// kChunkKeys of them when they come from `buf`. One key per lane for q·k, the softmax over the
// warp, lane l accumulating dims l·E .. l·E+E-1 of P·V. The chunk normalises and rotates its q
// itself. The new token's key and value (position pos) come from the q/k/v product, not the
// cache: the chunk holding pos rotates k itself, and for the first head of each group also
// stores k and v into the cache (no other chunk reads the cache at pos). With `buf` (whose
// prefetch_kv was issued) the cached keys and values come from shared memory, else from the
// cache. Writes the unnormalised partial (max, sum, P·V) to `part` [2 + hd] in shared memory,
// for combine_chunks after a block barrier.
//
// A head's steps timed on the 8B (clock marks inside this function): q arrives ~1.0 µs
// after the barrier (an L2 round trip), so nothing else on the path may wait for memory: the
// gains and rotation are computed before the barrier, the new value is stored from the
// registers that hold it, and P·V issues its shared-memory reads in batches of 16 keys.
// PARTIAL: the rotation may cover part of the head (hybrid steps).
template <int E, bool PARTIAL>
__device__ void chunk_attention(const StepArgs& a, const StepLayerDev& L, int hq, int lo, int hi,
                                int pos, float* qs, const char* buf, const HeadConsts<E>& hc,
                                float* part, int lane) {
  const int hd = E * 32, nkv = a.nkv, group = a.nh / nkv, g = hq / group;
  const int64_t row = int64_t(nkv) * hd;
  using VecE = VecOf<E>;
  constexpr int kBatch = E == 8 ? 8 : 16;  // V rows in flight per lane (registers: E / 2 each)
  // The new token's key and this lane's values at pos, when this chunk holds pos: requested
  // together with q.
  VecE v_new{};
  float k[E] = {};
  if (hi == pos) {
    v_new = __ldcg(reinterpret_cast<const VecE*>(a.v + g * hd + lane * E));
    load_head<E>(a.k + g * hd, lane, k);
  }
  {
    float x[E];
    load_head<E>(a.q + hq * hd, lane, x);
    norm_rope<E, PARTIAL>(a, x, L.q_norm != nullptr, hc.qg, hc);
#pragma unroll
    for (int j = 0; j < E; ++j) qs[lane + 32 * j] = x[j] * a.scale;
  }
  float s_new = 0.0f;  // q · k at pos, when this chunk holds pos
  if (hi == pos) {
    float t = 0.0f;
    norm_rope<E, PARTIAL>(a, k, L.k_norm != nullptr, hc.kg, hc);
#pragma unroll
    for (int j = 0; j < E; ++j) t += qs[lane + 32 * j] * k[j];  // this lane's own qs elements
    s_new = warp_sum(t);
    if (hq % group == 0) {
      __nv_bfloat16* kc = kv_row(a.kv_blocks, L.k_off + g * hd, row, pos);
#pragma unroll
      for (int j = 0; j < E; ++j) kc[lane + 32 * j] = __float2bfloat16(k[j]);
      *reinterpret_cast<VecE*>(kv_row(a.kv_blocks, L.v_off + g * hd + lane * E, row, pos)) = v_new;
    }
  }
  if (buf) copy16_wait_all();  // this lane's copies landed; the __syncwarp shows everyone's
  __syncwarp();
  float m = -INFINITY, l = 0.0f, acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.0f;
  auto accumulate = [&](const VecE& vv, float pj) {
    __nv_bfloat162 v2[E / 2];
    std::memcpy(v2, &vv, sizeof vv);
#pragma unroll
    for (int e = 0; e < E / 2; ++e) {
      const float2 f = __bfloat1622float2(v2[e]);
      acc[2 * e] += pj * f.x;
      acc[2 * e + 1] += pj * f.y;
    }
  };
  const float4* q4 = reinterpret_cast<const float4*>(qs);  // qs: hd floats, 16-byte aligned
  // The row is unrolled by 8 words (4 for heads of 256), not fully: the step's kernel is large
  // (146–212 KB of code), so code run once per layer, as attention is, comes in from L2 a line at
  // a time; a head of 256's scores took 6.8 µs fully unrolled. Measured on one machine,
  // 8 / 4 against 16 / 8 words, 9B 222.8 → 225.4 t/s, 8B 233.8 → 238.2.
  constexpr int kScoreUnroll = E == 8 ? 4 : 8;
  auto score = [&](const uint4* kr, auto load) {
    float t = 0.0f;
#pragma unroll kScoreUnroll
    for (int w = 0; w < hd / 8; ++w) {
      const uint4 kv = load(kr + w);
      const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&kv);
      const float4 qa = q4[2 * w], qb = q4[2 * w + 1];
      const float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(k2[j]);
        t += qv[2 * j] * f.x + qv[2 * j + 1] * f.y;
      }
    }
    return t;
  };
  // The lane's key p: the new key's score from registers, a cached key's through `load`, and
  // -inf past hi.
  auto key_score = [&](int p, const uint4* kr, auto load) {
    return p == pos ? s_new : p <= hi ? score(kr, load) : -INFINITY;
  };
  if (buf) {
    // One block of at most 32 keys, all in shared memory (pos: from registers).
    const int p = lo + lane;
    const bool ok = p <= hi;
    const float s = key_score(p, reinterpret_cast<const uint4*>(buf + lane * k_stride_bytes(hd)),
                              [](const uint4* q) { return *q; });
    m = warp_max(s);
    const float pr = ok ? __expf(s - m) : 0.0f;
    l = warp_sum(pr);
    const char* vbuf = buf + kChunkKeys * k_stride_bytes(hd);
    const int n_keys = hi - lo + 1;
    for (int j0 = 0; j0 < n_keys; j0 += kBatch) {
      VecE vv[kBatch];  // every row of the batch requested before any is used; past hi: zeros
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int q = j0 + j;
        vv[j] = q >= n_keys     ? VecE{}
                : lo + q == pos ? v_new
                                : *reinterpret_cast<const VecE*>(vbuf + q * hd * 2 + lane * E * 2);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) accumulate(vv[j], __shfl_sync(0xffffffffu, pr, j0 + j));
    }
  } else {
    for (int base = lo; base <= hi; base += 32) {
      const int p = base + lane;
      const bool ok = p <= hi;
      const float s = key_score(
          p, reinterpret_cast<const uint4*>(kv_row(a.kv_blocks, L.k_off + g * hd, row, min(p, hi))),
          [](const uint4* q) { return __ldcg(q); });
      const float m_new = fmaxf(m, warp_max(s));
      const float pr = ok ? __expf(s - m_new) : 0.0f;
      const float corr = m == -INFINITY ? 0.0f : __expf(m - m_new);
      l = l * corr + warp_sum(pr);
      m = m_new;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[e] *= corr;
      const int n_keys = min(32, hi - base + 1);
      // V in batches, every row of a batch requested before any is used; the lane's E values
      // in one load. Keys past hi: zeros (p = 0).
#pragma unroll
      for (int j0 = 0; j0 < 32; j0 += kBatch) {
        if (j0 >= n_keys) break;
        VecE vv[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int q = base + j0 + j;
          vv[j] = q == pos  ? v_new
                  : q <= hi ? __ldcg(reinterpret_cast<const VecE*>(
                                  kv_row(a.kv_blocks, L.v_off + g * hd + lane * E, row, q)))
                            : VecE{};
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) accumulate(vv[j], __shfl_sync(0xffffffffu, pr, j0 + j));
      }
    }
  }
  if (lane == 0) {
    part[0] = m;
    part[1] = l;
  }
#pragma unroll
  for (int e = 0; e < E; ++e) part[2 + lane * E + e] = acc[e];
  __syncwarp();  // qs is rewritten by this warp's next chunk
}

// The head's attention output from its nc chunks' partials (a warp; lane l owns dims
// l·E .. l·E+E-1; chunk j's partial at part + j·(hd + 2)):
// bf16(Σ_c e^(m_c - M) · pv_c / Σ_c e^(m_c - M) · l_c), chunks in order; with an output gate
// (GATED and StepArgs::gated: `gate`, the lane's E values of the gate's rows, which phase 1 stores
// after q, k and v) then times sigmoid(gate), rounded again, as mul_sigmoid computes it.
// GLOBAL: the partials were written by other blocks (read through L2).
template <int E, bool GATED, bool GLOBAL = false>
__device__ __forceinline__ void combine_chunks(const StepArgs& a, int hq, int nc,
                                               const float* parts, const VecOf<E>& gate, int lane) {
  // Loops over the nc chunks, not unrolled over the most chunks: this runs once per head and
  // layer, with its code cold (see kScoreUnroll); the same sums in the same order.
  const int hd = E * 32, ps = hd + 2;
  auto part = [&](int i) {
    if constexpr (GLOBAL)
      return __ldcg(parts + i);
    else
      return parts[i];
  };
  float M = -INFINITY;
#pragma unroll 1
  for (int j = 0; j < nc; ++j) M = fmaxf(M, part(j * ps));
  float num[E], den = 0.0f;
#pragma unroll
  for (int e = 0; e < E; ++e) num[e] = 0.0f;
#pragma unroll 1
  for (int j = 0; j < nc; ++j) {
    const float w = __expf(part(j * ps) - M);
    den += w * part(j * ps + 1);
#pragma unroll
    for (int e = 0; e < E; ++e) num[e] += w * part(j * ps + 2 + lane * E + e);
  }
  const float inv = den > 0.0f ? 1.0f / den : 0.0f;
  __nv_bfloat16 g[E];
  std::memcpy(g, &gate, sizeof gate);
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float y = num[e] * inv;
    if (GATED && a.gated) y = bf_round(y) * sigmoid_f(bf(g[e]));
    a.attn[hq * hd + lane * E + e] = __float2bfloat16(y);
  }
}

}  // namespace hearth::cuda::step
