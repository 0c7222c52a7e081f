// Causal softmax attention over the paged KV cache (common.h, KvDev): GQA, sliding window, softcap,
// scale. One SIMT kernel for decode (and for prefill shapes the tensor-core kernel does not take),
// FlashAttention-style: a block owns NQ queries (the query heads that share one KV head, times T
// consecutive tokens, so each K/V row read serves all of them), walks its key range in 32-key
// steps per warp (one key per lane for Q·K, one slice of head dims per lane for P·V) with an
// online softmax in f32, and merges its 4 warps at the end.
// Decode (n ≤ 8 tokens) is latency-bound, so a step issues all of a lane's loads at once (its
// whole K row in 16-byte words, V in 2- to 16-byte slices of many keys) instead of a chain of
// small dependent ones, and the key range is split across blocks (split-K) in whole block
// steps (128 keys) so that a single token keeps every SM busy. The last block of a group to
// finish merges the splits' partials (an arrival counter per group in the workspace), so there
// is no second launch. Positions and the cache's first valid position are read from device
// memory, and the split count depends only on the table's span (a power of two), so a captured
// decode graph stays valid while the sequence grows (until the span doubles); splits past the
// current length are empty (m = -inf, l = 0). K/V are bf16; q and out any float dtype.
// attention() sends prefill (n_tokens > 8) to the tensor-core kernel of attention_mma.cu where
// it applies (head dims 64/128/256, 16-byte aligned operands) and keeps this one for the rest.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kChunk = 32;                   // keys per warp step: one per lane
constexpr int kBlockKeys = kWarps * kChunk;  // keys per block step; split lengths are multiples

struct AttnArgs {
  const void* q;
  int qdt;
  void* out;
  int odt;
  void* const* blocks;   // the cache's block table
  int64_t k_off, v_off;  // the layer's keys and values in a block (elements)
  const int32_t* positions;
  const int32_t* first;
  const SeqKv* seqs;  // non-null: token t is a sequence of its own, its cache seqs[t] (blocks
                      // and first above unused; one token per block)
  float* part;        // split partials [n_splits][n_tokens·n_head][2 + hd] (m, l, acc); null: one
  unsigned* arrived;  // [blocks_x] splits finished per group; 0 between launches
  int n_tokens, n_head, n_head_kv, head_dim;
  int heads_per_block, tokens_per_block, head_chunks;
  int window;
  float scale, softcap;
  int split_len, n_splits;
};

// The fixed layout of a configuration: NQ queries per block, DPL head dims per lane in P·V
// (head_dim ≤ 32·DPL). q and acc rows are padded to 32·DPL with zeros, so every loop over head
// dims has a fixed trip count.
template <int NQ, int DPL>
struct Cfg {
  static constexpr int kHdp = 32 * DPL;
  // The loads in flight are bounded by what the accumulators (NQ·DPL registers) leave of 255
  // registers: a whole K row of head dim 128 (64 registers) up to NQ·DPL = 32, V slices of up
  // to 64 registers up to NQ·DPL = 16; half beyond. Past these ptxas spills (nvcc 13); below
  // them it hoists later pieces and batches by itself where registers allow.
  static constexpr int kKBudget = NQ * DPL <= 32 ? 64 : 32;
  static constexpr int kVBudget = NQ * DPL <= 16 ? 64 : 32;
  // A lane's K row in 16-byte words (4 registers each), loaded in pieces.
  static constexpr int kKWords = kHdp / 8;
  static constexpr int kKPiece = kKWords < kKBudget / 4 ? kKWords : kKBudget / 4;
  static constexpr int kKPieces = kKWords / kKPiece;
  // V: a lane reads DPL contiguous bf16 of each key's row (DPL/2 registers, at least one), for
  // a batch of keys at once.
  static constexpr int kVRegs = DPL > 2 ? DPL / 2 : 1;
  static constexpr int kVBatch = kVBudget / kVRegs < kChunk ? kVBudget / kVRegs : kChunk;
  static constexpr int kVBatches = kChunk / kVBatch;
  // The first V batch is requested together with K: a step then costs one round trip, not two.
  static constexpr bool kVEarly = NQ * DPL <= 32;
  // Shared memory, in floats: q [NQ][kHdp], p [kWarps][NQ][32], (m, l) [kWarps][NQ][2],
  // acc [kWarps][NQ][kHdp], each query's key range (int lo, hi) [NQ]. The split merge reuses p
  // for its weights [NQ][kMaxSplits].
  static constexpr int kQ = 0;
  static constexpr int kP = kQ + NQ * kHdp;
  static constexpr int kMl = kP + kWarps * NQ * kChunk;
  static constexpr int kAcc = kMl + kWarps * NQ * 2;
  static constexpr int kRange = kAcc + kWarps * NQ * kHdp;
  static constexpr int kFloats = kRange + 2 * NQ;
  static_assert(kWarps * kChunk >= kMaxSplits, "the split weights must fit the p area");
};

// A lane's slice of a V row: DPL bf16 in one load.
template <int DPL>
struct VWord;
template <>
struct VWord<1> {
  using T = unsigned short;
};
template <>
struct VWord<2> {
  using T = unsigned;
};
template <>
struct VWord<4> {
  using T = uint2;
};
template <>
struct VWord<8> {
  using T = uint4;
};

// bf16 → f32 is exact: a bf16 is the top half of an f32.
__device__ __forceinline__ float bf_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ void unpack(unsigned short w, float (&f)[1]) { f[0] = bf_lo(w); }
__device__ __forceinline__ void unpack(unsigned w, float (&f)[2]) {
  f[0] = bf_lo(w);
  f[1] = bf_hi(w);
}
__device__ __forceinline__ void unpack(uint2 w, float (&f)[4]) {
  f[0] = bf_lo(w.x);
  f[1] = bf_hi(w.x);
  f[2] = bf_lo(w.y);
  f[3] = bf_hi(w.y);
}
__device__ __forceinline__ void unpack(uint4 w, float (&f)[8]) {
  f[0] = bf_lo(w.x);
  f[1] = bf_hi(w.x);
  f[2] = bf_lo(w.y);
  f[3] = bf_hi(w.y);
  f[4] = bf_lo(w.z);
  f[5] = bf_hi(w.z);
  f[6] = bf_lo(w.w);
  f[7] = bf_hi(w.w);
}

// One warp step over keys [base, base + 32): key j of the step is position base + j. Keys past
// the range's end (base + last) are clamped to it, so every lane reads a row the block reads
// anyway; their scores are masked.
struct Step {
  int base, last;
  __device__ __forceinline__ Step(int base_, int k_hi) : base(base_), last(k_hi - base_) {}
  __device__ __forceinline__ int pos(int j) const { return base + min(j, last); }
};

// Words [piece·N, piece·N + N) of a K row; words past the head dim read as zero.
template <int N>
__device__ __forceinline__ void load_k(uint4 (&k)[N], const __nv_bfloat16* krow, int piece,
                                       int words) {
#pragma unroll
  for (int u = 0; u < N; ++u) {
    const int w = piece * N + u;
    k[u] = w < words ? *reinterpret_cast<const uint4*>(krow + 8 * w) : make_uint4(0, 0, 0, 0);
  }
}

// The lane's V slices of keys [j0, j0 + N) of the step (zero for lanes past the head dim);
// vcol: the lane's first element in a block.
template <typename V, int N>
__device__ __forceinline__ void load_v(V (&v)[N], void* const* blocks, int64_t vcol, int64_t row,
                                       const Step& st, int j0, bool lane_ok) {
#pragma unroll
  for (int j = 0; j < N; ++j)
    v[j] = lane_ok ? *reinterpret_cast<const V*>(kv_row(blocks, vcol, row, st.pos(j0 + j))) : V{};
}

// s[i] += q_i · k over a piece of the lane's K row (q rows in shared memory, read as broadcasts).
template <int NQ, int HDP, int N>
__device__ __forceinline__ void dot_k(float (&s)[NQ], const uint4 (&k)[N], const float* qs,
                                      int piece) {
#pragma unroll
  for (int u = 0; u < N; ++u) {
    float kf[8];
    unpack(k[u], kf);
    const int d = (piece * N + u) * 8;
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
      const float4 q0 = *reinterpret_cast<const float4*>(qs + i * HDP + d);
      const float4 q1 = *reinterpret_cast<const float4*>(qs + i * HDP + d + 4);
      s[i] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] +
              q1.y * kf[5] + q1.z * kf[6] + q1.w * kf[7];
    }
  }
}

// acc[i] += Σ_j p_i(j0 + j) · v_j over a batch of keys; pw is the warp's p [NQ][32].
template <int NQ, int DPL, typename V, int N>
__device__ __forceinline__ void add_pv(float (&acc)[NQ][DPL], const V (&v)[N], const float* pw,
                                       int j0) {
  static_assert(N % 4 == 0, "keys go four at a time");
#pragma unroll
  for (int j = 0; j < N; j += 4) {
    float vf[4][DPL];
#pragma unroll
    for (int t = 0; t < 4; ++t) unpack(v[j + t], vf[t]);
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
      const float4 p = *reinterpret_cast<const float4*>(pw + i * kChunk + j0 + j);
#pragma unroll
      for (int e = 0; e < DPL; ++e)
        acc[i][e] += p.x * vf[0][e] + p.y * vf[1][e] + p.z * vf[2][e] + p.w * vf[3][e];
    }
  }
}

// Element-wise fallbacks for head dims that are not a multiple of 8 or unaligned caches.
template <int NQ, int HDP>
__device__ __forceinline__ void dot_k_scalar(float (&s)[NQ], const __nv_bfloat16* krow,
                                             const float* qs, int hd) {
#pragma unroll 4
  for (int d = 0; d < hd; ++d) {
    const float kf = __bfloat162float(krow[d]);
#pragma unroll
    for (int i = 0; i < NQ; ++i) s[i] += qs[i * HDP + d] * kf;
  }
}

template <int NQ, int DPL>
__device__ __forceinline__ void add_pv_scalar(float (&acc)[NQ][DPL], void* const* blocks,
                                              int64_t vcol, int64_t row, const Step& st,
                                              const float* pw, int n_dims) {
#pragma unroll 4
  for (int j = 0; j < kChunk; ++j) {
    const __nv_bfloat16* vrow = kv_row(blocks, vcol, row, st.pos(j));
    float vf[DPL];
#pragma unroll
    for (int e = 0; e < DPL; ++e) vf[e] = e < n_dims ? __bfloat162float(vrow[e]) : 0.0f;
#pragma unroll
    for (int i = 0; i < NQ; ++i) {
      const float p = pw[i * kChunk + j];
#pragma unroll
      for (int e = 0; e < DPL; ++e) acc[i][e] += p * vf[e];
    }
  }
}

// Folds one step's scores into each query's running (m, l, acc) and leaves p in pw. m is the
// warp's running max (uniform across lanes); l is a per-lane partial sum, reduced once at the
// end, which saves a warp reduction per step.
template <int NQ, int DPL>
__device__ __forceinline__ void softmax_step(const float (&s)[NQ], float (&m)[NQ], float (&l)[NQ],
                                             float (&acc)[NQ][DPL], const int2* range, int kp,
                                             bool in_step, float softcap, float* pw, int lane) {
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    float sc = s[i];
    if (softcap > 0.0f) sc = tanhf(sc / softcap) * softcap;
    const int2 r = range[i];
    sc = in_step && kp >= r.x && kp <= r.y ? sc : -INFINITY;
    const float m_new = fmaxf(m[i], warp_max(sc));
    const float p = m_new == -INFINITY ? 0.0f : __expf(sc - m_new);
    const float corr = m_new == -INFINITY ? 1.0f : __expf(m[i] - m_new);
    l[i] = l[i] * corr + p;
    m[i] = m_new;
#pragma unroll
    for (int e = 0; e < DPL; ++e) acc[i][e] *= corr;
    pw[i * kChunk + lane] = p;
  }
}

// VEC: 16-byte K words and V slices (head_dim % 8 == 0, aligned cache); otherwise element-wise.
// The minimum of one block per SM is stated so that ptxas does not trade spills for occupancy
// (left to itself, nvcc 13 squeezes some variants to 64-168 registers and spills); decode grids
// run about two blocks per SM, which up to 255 registers still allow.
template <int NQ, int DPL, bool VEC>
__global__ void __launch_bounds__(kWarps * 32, 1) attention_kernel(AttnArgs a) {
  using C = Cfg<NQ, DPL>;
  using V = typename VWord<DPL>::T;
  constexpr int HDP = C::kHdp;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  pdl_trigger();  // launched with launch_pdl: q and the cache come from earlier kernels
  pdl_wait();
  const int hd = a.head_dim, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = a.n_head / a.n_head_kv;
  // Block → (token tile, kv head, head chunk).
  int bx = blockIdx.x;
  const int chunk = bx % a.head_chunks;
  bx /= a.head_chunks;
  const int g = bx % a.n_head_kv;
  Queries qy;
  qy.t0 = (bx / a.n_head_kv) * a.tokens_per_block;
  qy.h0 = g * group + chunk * a.heads_per_block;
  qy.hpb = min(a.heads_per_block, group - chunk * a.heads_per_block);
  qy.n_live = min(qy.hpb * a.tokens_per_block, (a.n_tokens - qy.t0) * qy.hpb);

  // The cache: the call's, or in a step of several sequences the block's token's own.
  void* const* blocks = a.blocks;
  int64_t first;
  if (a.seqs) {
    const SeqKv& sk = a.seqs[qy.t0];
    blocks = sk.blocks;
    first = sk.first;
  } else {
    first = *a.first;
  }
  // Each query sees positions [lo, hi] (shared memory: registers are for the K/V in flight);
  // the block walks their union.
  int2* range = reinterpret_cast<int2*>(smem + C::kRange);
  int lo_b = INT_MAX, hi_b = INT_MIN;
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    int2 r = make_int2(0, -1);  // idle: sees nothing
    if (i < qy.n_live) {
      const int pos = a.positions[qy.token(i)];
      int64_t l = first;
      if (a.window > 0) l = max(l, int64_t(pos) - a.window + 1);
      r = make_int2(int(l), pos);
      lo_b = min(lo_b, r.x);
      hi_b = max(hi_b, r.y);
    }
    if (int(threadIdx.x) == i) range[i] = r;
  }
  // The span fixes the grid (graph replays); the current length decides how many splits
  // have keys. Splits past it leave at once without counting themselves, and a group whose keys
  // fit one split writes its output directly: no partials, no merge (short contexts).
  int n_used = 1;
  if (a.part && lo_b <= hi_b) n_used = min(a.n_splits, (hi_b - lo_b) / a.split_len + 1);
  if (int(blockIdx.y) >= n_used) return;  // uniform over the block
  const bool split = a.part && n_used > 1;
  // This split's keys, counted back from the newest: [k_lo, k_hi] (empty when k_lo > k_hi).
  int k_hi = -1, k_lo = 0;
  if (lo_b <= hi_b) {
    k_hi = hi_b - int(blockIdx.y) * a.split_len;
    k_lo = max(lo_b, k_hi - a.split_len + 1);
  }

  const int64_t row = int64_t(a.n_head_kv) * hd;
  const int64_t kcol = a.k_off + int64_t(g) * hd;
  const int64_t vcol = a.v_off + int64_t(g) * hd + lane * DPL;
  const int words = hd / 8, v_dims = min(DPL, hd - lane * DPL);
  float* qs = smem + C::kQ;
  float* pw = smem + C::kP + warp * NQ * kChunk;

  // The first step's loads go out before q is staged, so the two round trips overlap.
  uint4 kr[C::kKPiece];
  V vr[C::kVBatch];
  const __nv_bfloat16* krow = nullptr;
  int base = k_lo + warp * kChunk;
  if constexpr (VEC) {
    if (base <= k_hi) {
      const Step st(base, k_hi);
      krow = kv_row(blocks, kcol, row, st.pos(lane));
      load_k(kr, krow, 0, words);
      if constexpr (C::kVEarly) load_v(vr, blocks, vcol, row, st, 0, v_dims > 0);
    }
  }
  {
    // All of a thread's q loads go out before any is stored: a loop that stored each before
    // loading the next made NQ·HDP/128 round trips (8 for 4 heads of 256) of a decode step.
    constexpr int kPer = (NQ * HDP + kWarps * 32 - 1) / (kWarps * 32);
    float qv[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int x = int(threadIdx.x) + j * kWarps * 32, i = x / HDP, d = x % HDP;
      qv[j] = x < NQ * HDP && i < qy.n_live && d < hd
                  ? ld(a.q, a.qdt, qy.index(i, a.n_head) * hd + d) * a.scale
                  : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int x = int(threadIdx.x) + j * kWarps * 32;
      if (x < NQ * HDP) qs[x] = qv[j];
    }
  }
  __syncthreads();

  float m[NQ], l[NQ], acc[NQ][DPL];
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int e = 0; e < DPL; ++e) acc[i][e] = 0.0f;
  }
#pragma unroll 1
  for (bool ahead = VEC; base <= k_hi; base += kBlockKeys, ahead = false) {
    const Step st(base, k_hi);
    float s[NQ];
#pragma unroll
    for (int i = 0; i < NQ; ++i) s[i] = 0.0f;
    if constexpr (VEC) {
      if (!ahead) {
        krow = kv_row(blocks, kcol, row, st.pos(lane));
        load_k(kr, krow, 0, words);
        if constexpr (C::kVEarly) load_v(vr, blocks, vcol, row, st, 0, v_dims > 0);
      }
      dot_k<NQ, HDP>(s, kr, qs, 0);
#pragma unroll
      for (int piece = 1; piece < C::kKPieces; ++piece) {
        load_k(kr, krow, piece, words);
        dot_k<NQ, HDP>(s, kr, qs, piece);
      }
    } else {
      dot_k_scalar<NQ, HDP>(s, kv_row(blocks, kcol, row, st.pos(lane)), qs, hd);
    }
    softmax_step(s, m, l, acc, range, base + lane, lane <= st.last, a.softcap, pw, lane);
    __syncwarp();  // p of every lane is in pw
    if constexpr (VEC) {
#pragma unroll
      for (int b = 0; b < C::kVBatches; ++b) {
        // Batches wholly past the step's last key hold only masked keys (p = 0): skipped, which
        // saves their round trips on a short context's last step (st.last is warp-uniform).
        if (b > 0 && b * C::kVBatch > st.last) break;
        if (b > 0 || !C::kVEarly) load_v(vr, blocks, vcol, row, st, b * C::kVBatch, v_dims > 0);
        add_pv<NQ, DPL>(acc, vr, pw, b * C::kVBatch);
      }
    } else {
      add_pv_scalar<NQ, DPL>(acc, blocks, vcol, row, st, pw, v_dims);
    }
    __syncwarp();  // pw is rewritten by the next step
  }

  // Merge the warps: warp w publishes (m, l, acc); thread x then combines one (query, dim).
  float* ml = smem + C::kMl;     // [kWarps][NQ][2]
  float* accs = smem + C::kAcc;  // [kWarps][NQ][HDP]
#pragma unroll
  for (int i = 0; i < NQ; ++i) {
    const float lsum = warp_sum(l[i]);
    if (lane == 0) {
      ml[(warp * NQ + i) * 2] = m[i];
      ml[(warp * NQ + i) * 2 + 1] = lsum;
    }
#pragma unroll
    for (int e = 0; e < DPL; ++e) accs[(warp * NQ + i) * HDP + lane * DPL + e] = acc[i][e];
  }
  __syncthreads();
  const SplitTarget tgt{a.part, a.arrived, a.out, a.odt, a.n_tokens, a.n_head, a.head_dim};
  for (int x = threadIdx.x; x < qy.n_live * hd; x += blockDim.x) {
    const int i = x / hd, d = x - i * hd;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mm = fmaxf(mm, ml[(w * NQ + i) * 2]);
    float ll = 0.0f, o = 0.0f;
    if (mm != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = __expf(ml[(w * NQ + i) * 2] - mm);
        ll += ml[(w * NQ + i) * 2 + 1] * c;
        o += accs[(w * NQ + i) * HDP + d] * c;
      }
    }
    const int64_t qi = qy.index(i, a.n_head);
    if (split)
      store_partial(tgt, int(blockIdx.y), qi, d, mm, ll, o);
    else
      st(a.out, a.odt, qi * hd + d, ll > 0.0f ? o / ll : 0.0f);
  }
  if (split) merge_splits<NQ, HDP, kWarps * 32>(tgt, qy, smem + C::kP, n_used);
}

struct Shape {
  int nq, dpl, heads_per_block, tokens_per_block, head_chunks, blocks_x, split_len, n_splits;
};

// rows_apart: every token is a sequence of its own (attention_rows), so decode-shaped at any
// count: one token per block, split-K by the largest span.
Shape shape_for(int sm_count, int64_t n_tokens, const AttentionParams& p, int64_t span,
                bool rows_apart, int fixed_split = 0) {
  const bool decode = n_tokens <= 8 || rows_apart;
  Shape s{};
  s.dpl = p.head_dim <= 32 ? 1 : p.head_dim <= 64 ? 2 : p.head_dim <= 128 ? 4 : 8;
  const int max_nq = std::min(16, 64 / s.dpl);
  const int group = p.n_head / p.n_head_kv;
  s.heads_per_block = std::min(group, max_nq);
  s.head_chunks = (group + s.heads_per_block - 1) / s.heads_per_block;
  // Decode: one token per block, the split-K supplies the parallelism.
  s.tokens_per_block = decode ? 1 : std::max(1, max_nq / s.heads_per_block);
  const int need = s.heads_per_block * s.tokens_per_block;
  s.nq = need <= 4 ? 4 : need <= 8 ? 8 : 16;
  if (s.nq * s.dpl > 64) s.nq = 64 / s.dpl;
  const int64_t tiles = (n_tokens + s.tokens_per_block - 1) / s.tokens_per_block;
  s.blocks_x = int(tiles * p.n_head_kv * s.head_chunks);
  s.split_len = 1 << 30;
  s.n_splits = 1;
  if (decode && fixed_split > 0 && rows_apart) {
    // Fixed pieces at any row count (a call takes at most attention_rows_per_call rows, so every
    // group has its counter).
    int64_t keys = span;
    if (p.window > 0) keys = std::min<int64_t>(keys, p.window + n_tokens);
    s.split_len = fixed_split;
    s.n_splits = int(std::min<int64_t>((keys + fixed_split - 1) / fixed_split, kMaxSplits + 1));
  } else if (decode && s.blocks_x <= kMaxSplitGroups) {
    int64_t keys = span;
    if (p.window > 0) keys = std::min<int64_t>(keys, p.window + n_tokens);
    // About two blocks per SM for long contexts.
    const int target = std::clamp((2 * sm_count + s.blocks_x - 1) / s.blocks_x, 1, kMaxSplits);
    int64_t len = (keys + target - 1) / target;
    // Whole block steps, so that every warp of a split has keys: short contexts use few splits
    // of 128 keys rather than many of 32 with three warps of four idle.
    len = std::max<int64_t>(kBlockKeys, (len + kBlockKeys - 1) / kBlockKeys * kBlockKeys);
    s.split_len = int(len);
    s.n_splits = int((keys + len - 1) / len);
  }
  return s;
}

template <int NQ, int DPL>
void configure() {
  static_assert(Cfg<NQ, DPL>::kFloats * 4 <= 96 * 1024, "shared memory");
  HEARTH_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<NQ, DPL, true>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
  HEARTH_CUDA_CHECK(cudaFuncSetAttribute(attention_kernel<NQ, DPL, false>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
}

template <int NQ, int DPL>
void launch(Ctx& ctx, const AttnArgs& a, int blocks_x, bool vec) {
  void (*kernel)(AttnArgs) =
      vec ? &attention_kernel<NQ, DPL, true> : &attention_kernel<NQ, DPL, false>;
  launch_pdl(ctx, kernel, dim3(unsigned(blocks_x), unsigned(a.n_splits)), dim3(kWarps * 32),
             size_t(Cfg<NQ, DPL>::kFloats) * 4, a);
}

void attention_simt(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv,
                    const int32_t* positions, const AttentionParams& p);
void launch_simt(Ctx& ctx, AttnArgs& a, const Ten& out, const Ten& q, int64_t span,
                 const int32_t* positions, const AttentionParams& p, bool rows_apart, bool vec);

std::atomic<int> g_kernel{int(AttentionKernel::Auto)};

// The call's shape, after the checks both kernels need: a span the positions' int32 arithmetic
// holds, and a workspace (sized by attention_workspace_bytes) large enough for its splits.
Shape checked_shape(const Ctx& ctx, int64_t n_tokens, const AttentionParams& p, int64_t span,
                    bool rows_apart) {
  if (span < 1 || span > INT32_MAX - 2 * kChunk)
    cuda_fail("attention", "unsupported cache span", __FILE__, __LINE__);
  const Shape s = shape_for(ctx.sm_count, n_tokens, p, span, rows_apart, ctx.attention_split_keys);
  if (s.n_splits > kMaxSplits)
    cuda_fail("attention", "more positions than fixed-length splits cover (--deterministic)",
              __FILE__, __LINE__);
  if (rows_apart && ctx.attention_split_keys > 0 && s.blocks_x > kMaxSplitGroups)
    cuda_fail("attention", "more rows than attention_rows_per_call", __FILE__, __LINE__);
  if (s.n_splits > 1 &&
      ctx.attn_ws_bytes < attention_workspace_bytes(ctx, n_tokens, p, span, rows_apart))
    cuda_fail("attention", "split-K workspace too small", __FILE__, __LINE__);
  return s;
}

// Query rows per block of the tensor-core kernel. 128-row tiles halve the K/V bytes loaded per
// FLOP but make half as many blocks, and under the causal mask the late tiles carry most of the
// work: use them only when there are several waves of blocks.
int mma_block_m(const Ctx& ctx, int64_t n_tokens, const AttentionParams& p, AttentionKernel k) {
  if (k == AttentionKernel::Mma64) return 64;
  if (k == AttentionKernel::Mma128) return 128;
  const int64_t blocks128 = (n_tokens + 127) / 128 * p.n_head;
  return blocks128 >= 3 * int64_t(ctx.sm_count) ? 128 : 64;
}

}  // namespace

void attention_set_kernel(AttentionKernel k) { g_kernel.store(int(k), std::memory_order_relaxed); }

void attention_init() {
  attention_mma_init();
  attention_rows_mma_init();
  configure<4, 1>();
  configure<8, 1>();
  configure<16, 1>();
  configure<4, 2>();
  configure<8, 2>();
  configure<16, 2>();
  configure<4, 4>();
  configure<8, 4>();
  configure<16, 4>();
  configure<4, 8>();
  configure<8, 8>();
}

int64_t attention_rows_per_call(const AttentionParams& p) {
  // A counter per split group (blocks_x of one row each), and at most 128 rows, whose block
  // tables (one per row, though a prompt chunk's rows share one cache) stay a small upload.
  const Shape s = shape_for(1, 1, p, 1, /*rows_apart=*/true);
  return std::clamp<int64_t>(kMaxSplitGroups / std::max(1, s.blocks_x), 1, 128);
}

size_t attention_workspace_bytes(const Ctx& ctx, int64_t n_tokens, const AttentionParams& p,
                                 int64_t span, bool rows_apart) {
  const Shape s = shape_for(ctx.sm_count, n_tokens, p, span, rows_apart, ctx.attention_split_keys);
  if (s.n_splits <= 1) return 0;
  return kAttentionCounterBytes +
         size_t(s.n_splits) * size_t(n_tokens) * size_t(p.n_head) * size_t(p.head_dim + 2) * 4;
}

void attention(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv, const int32_t* positions,
               const AttentionParams& p) {
  const int64_t n_tokens = q.d[0];
  const auto k = AttentionKernel(g_kernel.load(std::memory_order_relaxed));
  if (n_tokens > 8 && k != AttentionKernel::Simt) {
    int bm = mma_block_m(ctx, n_tokens, p, k);
    if (!attention_mma_supported(out, q, kv, p, bm)) bm = 64;  // e.g. head_dim 256: 64 only
    if (attention_mma_supported(out, q, kv, p, bm))
      return attention_mma(ctx, out, q, kv, positions, p, bm);
  }
  attention_simt(ctx, out, q, kv, positions, p);
}

namespace {

void attention_simt(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv,
                    const int32_t* positions, const AttentionParams& p) {
  AttnArgs a{};
  a.blocks = kv.blocks;
  a.k_off = kv.k_off;
  a.v_off = kv.v_off;
  a.first = kv.first;
  // Blocks are whole allocations (256-byte aligned) and the backend keeps the offsets 16-byte
  // aligned, so rows of a head dim that is a multiple of 8 take 16-byte K words and V slices.
  launch_simt(ctx, a, out, q, kv.span, positions, p, false, p.head_dim % 8 == 0);
}

// The launch of attention_kernel for a's cache (or cache table) and the rest of the call.
void launch_simt(Ctx& ctx, AttnArgs& a, const Ten& out, const Ten& q, int64_t span,
                 const int32_t* positions, const AttentionParams& p, bool rows_apart, bool vec) {
  const int64_t n_tokens = q.d[0];
  if (p.head_dim < 1 || p.head_dim > 256)
    cuda_fail("attention", "unsupported head shape", __FILE__, __LINE__);
  const Shape s = checked_shape(ctx, n_tokens, p, span, rows_apart);
  a.q = q.p;
  a.qdt = q.dtype;
  a.out = out.p;
  a.odt = out.dtype;
  a.positions = positions;
  if (s.n_splits > 1) {
    a.arrived = reinterpret_cast<unsigned*>(ctx.attn_ws);
    a.part = ctx.attn_ws + kAttentionCounterBytes / 4;
  }
  a.n_tokens = int(n_tokens);
  a.n_head = p.n_head;
  a.n_head_kv = p.n_head_kv;
  a.head_dim = p.head_dim;
  a.heads_per_block = s.heads_per_block;
  a.tokens_per_block = s.tokens_per_block;
  a.head_chunks = s.head_chunks;
  a.window = p.window;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.split_len = s.split_len;
  a.n_splits = s.n_splits;
  switch (s.nq * 100 + s.dpl) {
    case 401:
      launch<4, 1>(ctx, a, s.blocks_x, vec);
      break;
    case 801:
      launch<8, 1>(ctx, a, s.blocks_x, vec);
      break;
    case 1601:
      launch<16, 1>(ctx, a, s.blocks_x, vec);
      break;
    case 402:
      launch<4, 2>(ctx, a, s.blocks_x, vec);
      break;
    case 802:
      launch<8, 2>(ctx, a, s.blocks_x, vec);
      break;
    case 1602:
      launch<16, 2>(ctx, a, s.blocks_x, vec);
      break;
    case 404:
      launch<4, 4>(ctx, a, s.blocks_x, vec);
      break;
    case 804:
      launch<8, 4>(ctx, a, s.blocks_x, vec);
      break;
    case 1604:
      launch<16, 4>(ctx, a, s.blocks_x, vec);
      break;
    case 408:
      launch<4, 8>(ctx, a, s.blocks_x, vec);
      break;
    case 808:
      launch<8, 8>(ctx, a, s.blocks_x, vec);
      break;
    default:
      cuda_fail("attention", "unsupported head shape", __FILE__, __LINE__);
  }
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace

void attention_rows(Ctx& ctx, const Ten& out, const Ten& q, const KvDev& kv, const SeqKv* seqs,
                    const int32_t* positions, const AttentionParams& p) {
  const auto k = AttentionKernel(g_kernel.load(std::memory_order_relaxed));
  if (k != AttentionKernel::Simt && attention_rows_mma_supported(out, q, kv, p)) {
    // The same splits as the SIMT kernel's: the workspace is sized by them.
    const Shape s = checked_shape(ctx, q.d[0], p, kv.span, /*rows_apart=*/true);
    return attention_rows_mma(ctx, out, q, kv, seqs, positions, p, s.split_len, s.n_splits);
  }
  AttnArgs a{};
  a.seqs = seqs;
  a.k_off = kv.k_off;
  a.v_off = kv.v_off;
  launch_simt(ctx, a, out, q, kv.span, positions, p, true, p.head_dim % 8 == 0);
}

}  // namespace hearth::cuda
