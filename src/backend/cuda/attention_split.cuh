// Split-K decode attention, shared by the SIMT kernel (attention.cu) and the tensor-core rows
// kernel (attention_rows_mma.cu): a group of blocks (one per split of the key range) computes
// the same queries; each writes its partial (m, l, acc) to the workspace, and the last block of
// the group to arrive merges them in split order (the same result whichever block comes last)
// and rearms the group's counter for the next launch. No second launch.
#pragma once
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

constexpr int kMaxSplits = 64;
// The arrival counters sit at the head of the workspace, one per group of blocks that share
// outputs (blockIdx.x). Their place is fixed so that no call's partials overlap another call's
// counters (layers may differ in shape); a decode grid with more groups than this fills the GPU
// without splitting anyway.
constexpr int kMaxSplitGroups = 1024;
constexpr size_t kAttentionCounterBytes = size_t(kMaxSplitGroups) * 4;

// Query slot i of a block: token t0 + i / hpb, head h0 + i % hpb; slots from n_live on are idle.
struct Queries {
  int t0, h0, hpb, n_live;
  __device__ __forceinline__ int token(int i) const { return t0 + i / hpb; }
  __device__ __forceinline__ int64_t index(int i, int n_head) const {  // (token, head) row
    return int64_t(token(i)) * n_head + h0 + i % hpb;
  }
};

// Where the partials and the merged output go. part: [n_splits][n_tokens·n_head][2 + head_dim]
// (m in natural-log units, l, acc); arrived: one counter per group (blockIdx.x), 0 between
// launches.
struct SplitTarget {
  float* part;
  unsigned* arrived;
  void* out;
  int odt, n_tokens, n_head, head_dim;
};

// Split `split`'s partial of query row qi: the output element d, and with d == 0 its (m, l).
__device__ __forceinline__ void store_partial(const SplitTarget& a, int split, int64_t qi, int d,
                                              float m, float l, float o) {
  const int64_t n_q = int64_t(a.n_tokens) * a.n_head;
  float* part = a.part + (int64_t(split) * n_q + qi) * (a.head_dim + 2);
  part[2 + d] = o;
  if (d == 0) {
    part[0] = m;
    part[1] = l;
  }
}

// Called by every thread of a block of kThreads after its partials are stored; ns splits have
// keys. wts: shared [NQ][kMaxSplits] floats, free by now. NQ·HDP bounds the block's outputs.
template <int NQ, int HDP, int kThreads>
__device__ void merge_splits(const SplitTarget& a, const Queries& qs, float* wts, int ns) {
  constexpr int kWarpsHere = kThreads / 32;
  __shared__ bool last;
  __threadfence();  // this block's partials are visible device-wide before it counts itself
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(a.arrived + blockIdx.x, 1u) == unsigned(ns - 1);
    if (last) atomicExch(a.arrived + blockIdx.x, 0u);  // every split has arrived: rearm
  }
  __syncthreads();
  if (!last) return;
  __threadfence();  // the other blocks' partials are read after their arrival was seen
  const int hd = a.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t stride = int64_t(a.n_tokens) * a.n_head * (hd + 2);
  // Split s weighs exp(m_s - m) / Σ_s' l_s' exp(m_s' - m) for its query: one warp per query,
  // a lane per split (at most 64). __ldcg: the partials were written by other blocks.
  for (int i = warp; i < qs.n_live; i += kWarpsHere) {
    const float* pm = a.part + qs.index(i, a.n_head) * (hd + 2);
    float ms[2], ls[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int s = lane + 32 * r;
      ms[r] = s < ns ? __ldcg(pm + s * stride) : -INFINITY;
      ls[r] = s < ns ? __ldcg(pm + s * stride + 1) : 0.0f;
    }
    const float mm = warp_max(fmaxf(ms[0], ms[1]));
    float c[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) c[r] = mm == -INFINITY ? 0.0f : __expf(ms[r] - mm);
    const float ll = warp_sum(ls[0] * c[0] + ls[1] * c[1]);
    const float inv = ll > 0.0f ? 1.0f / ll : 0.0f;
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (lane + 32 * r < ns) wts[i * kMaxSplits + lane + 32 * r] = c[r] * inv;
  }
  __syncthreads();
  // Outputs go in rounds of kPer per thread: output x = x0 + threadIdx.x + kThreads·j, each
  // summed over the splits in split order; the loads of four splits for all of a round's outputs
  // go out together (one round trip per four splits, not one per output and split). A round is
  // at most 8 outputs a thread, so that the registers stay bounded for any block shape.
  constexpr int kPer =
      (NQ * HDP + kThreads - 1) / kThreads < 8 ? (NQ * HDP + kThreads - 1) / kThreads : 8;
  const int n_out = qs.n_live * hd;
  for (int x0 = 0; x0 < n_out; x0 += kPer * kThreads) {
    float o[kPer];
    const float* pa[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int x = min(x0 + int(threadIdx.x) + j * kThreads, n_out - 1), i = x / hd;
      pa[j] = a.part + qs.index(i, a.n_head) * (hd + 2) + 2 + (x - i * hd);
      o[j] = 0.0f;
    }
#pragma unroll 4
    for (int s = 0; s < ns; ++s) {
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const int x = x0 + int(threadIdx.x) + j * kThreads;
        if (x < n_out) o[j] += wts[(x / hd) * kMaxSplits + s] * __ldcg(pa[j] + s * stride);
      }
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int x = x0 + int(threadIdx.x) + j * kThreads;
      if (x < n_out) {
        const int i = x / hd;
        st(a.out, a.odt, qs.index(i, a.n_head) * hd + (x - i * hd), o[j]);
      }
    }
  }
}

}  // namespace hearth::cuda
