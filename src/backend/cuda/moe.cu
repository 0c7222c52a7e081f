// Mixture-of-experts on the device (CudaBackend::moe_experts): routing, and for decode-sized
// batches (n ≤ 8 tokens) the routed experts' products, reading the chosen experts from device
// memory so a decode step has no host round trip and stays one CUDA graph.
//
// - moe_route: a warp per token holds its ≤ 512 f32 logits in registers (16 per lane): softmax
//   with max subtraction, then k rounds of warp argmax (ties → lower expert index), and the
//   weights renormalised over the k in slot order, as the host does. The softmax denominator is
//   a warp tree here and a sequential sum on the host, and expf is within 2 ulp of std::exp, so
//   experts whose probabilities differ in the last bits may be ordered differently; exact ties
//   (equal logits) give equal probabilities on both sides and pick the lower index on both.
// - moe_decode, two launches shaped like gemv.cu's decode products (16-byte non-caching weight
//   loads, several in flight per lane, W warps sharing a row, persistent blocks):
//   1. h[p] = act(gate_e · x_t) ⊙ (up_e · x_t) for each (token, slot) pair p = t·k + j,
//      e = ids[p]. Work rows are ordered row-major over the pairs, so when several tokens chose
//      one expert the same block reads that weight row at the same time (an L2 hit, not a
//      second pass over HBM).
//   2. y[t, r] = Σ_j w_tj · (down_e[r] · h[p]): one thread group per output row walks all k
//      slots' words in a fixed order, so no atomics and the same bits on every replay;
//      rounded to y's dtype once.
// - moe_combine (the grouped prefill path's last step): y[t] = Σ_j w_tj · o[pos(t, j)].
// Every kernel is launched with PDL and waits before reading anything: the expert weights a
// kernel reads depend on the routing, which an earlier kernel of the step writes.
#include <algorithm>
#include <climits>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe.h"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;                           // warps per block, every kernel here
constexpr int kPerLane = int(kMoeMaxExperts / 32);  // router logits a lane holds
constexpr int kMaxPairs = int(kMoeDecodeTokens * kMoeDecodeUsed);
// 16-byte weight loads per lane in flight per matrix: gemv.cu's measured default. (The row split
// and the resident blocks come from gemv.cu as well: gemv_split, gemv_resident_blocks.)
constexpr int kUnroll = 4;

__device__ __forceinline__ const uint4* expert_mat(const MoeMat& m, int32_t e) {
  if (m.table) return static_cast<const uint4*>(m.table[e]);
  return reinterpret_cast<const uint4*>(static_cast<const char*>(m.base) + int64_t(e) * m.stride);
}

// --- routing ---

// p[i] = softmax(row)[lane + 32i] for the lane's experts (-inf past E).
__device__ void softmax_lane(const float* row, int E, int lane, float (&p)[kPerLane]) {
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = lane + 32 * i;
    p[i] = e < E ? row[e] : -INFINITY;
    mx = fmaxf(mx, p[i]);
  }
  mx = warp_max(mx);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (lane + 32 * i < E) {
      p[i] = expf(p[i] - mx);
      sum += p[i];
    }
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < E) p[i] = p[i] / sum;
}

// The warp's best untaken expert: the largest key, ties → lower index; every lane gets it.
// Taken experts and those past E have key -inf, every other key is > -inf, so while fewer than
// E experts are taken the answer is a real, untaken expert.
__device__ int32_t warp_argmax(const float (&key)[kPerLane], int lane) {
  float bv = -INFINITY;
  int32_t bi = INT_MAX;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {  // increasing index: '>' keeps the lowest on ties
    if (key[i] > bv) {
      bv = key[i];
      bi = lane + 32 * i;
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  return bi;
}

__global__ void __launch_bounds__(kWarps * 32)
    route_kernel(const float* logits, int32_t* ids, float* weights, int64_t n, int32_t E, int32_t k,
                 int32_t norm_topk_prob) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t t = int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (t >= n) return;
  float p[kPerLane], key[kPerLane];
  softmax_lane(logits + t * E, E, lane, p);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)  // a NaN probability ranks below every number
    key[i] = lane + 32 * i >= E ? -INFINITY : (p[i] != p[i] ? -1.0f : p[i]);
  // Lane j keeps slot j; every lane adds the winners up in slot order, as the host does.
  int32_t my_id = 0;
  float my_p = 0.0f, top_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    const int32_t best = warp_argmax(key, lane);
    float mine = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      if (lane + 32 * i == best) {
        mine = p[i];
        key[i] = -INFINITY;
      }
    }
    const float pb = __shfl_sync(0xffffffffu, mine, best & 31);
    top_sum += pb;
    if (lane == j) {
      my_id = best;
      my_p = pb;
    }
  }
  if (lane < k) {
    ids[t * k + lane] = my_id;
    weights[t * k + lane] = norm_topk_prob ? my_p / top_sum : my_p;
  }
}

// --- decode products ---

// Warp-split bookkeeping shared by both kernels: a block of kWarps warps owns kWarps / split
// rows; the `split` warps of a row each take a contiguous piece of its 16-byte words.
struct RowSplit {
  int lane, warp, slot, piece, rows_per_block;
  int64_t lo, hi;  // this warp's words [lo, hi)
  __device__ RowSplit(int split, int64_t words) {
    lane = threadIdx.x & 31;
    warp = threadIdx.x >> 5;
    rows_per_block = kWarps / split;
    slot = warp / split;
    piece = warp % split;
    const int64_t len = (words + split - 1) / split;
    lo = min(words, piece * len);
    hi = min(words, lo + len);
  }
};

// Adds the pieces of a split row (N values per warp) in piece order into piece 0's v.
// Called by the whole block (it synchronises).
template <int N>
__device__ void combine_pieces(float (&v)[N], const RowSplit& s, int split) {
  __shared__ float part[kWarps][N];
  if (split == 1) return;
  if (s.lane == 0)
#pragma unroll
    for (int i = 0; i < N; ++i) part[s.warp][i] = v[i];
  __syncthreads();
  if (s.piece == 0)
    for (int q = 1; q < split; ++q)
#pragma unroll
      for (int i = 0; i < N; ++i) v[i] += part[s.warp + q][i];
  __syncthreads();  // part[] is rewritten by the next row
}

struct UpArgs {
  const uint4* x;      // [n, in8] bf16
  const int32_t* ids;  // [pairs]
  MoeMat gate, up;     // per expert [rows, in8] bf16
  __nv_bfloat16* h;    // [pairs, rows]
  int64_t in8, rows;   // H / 8, I
  int32_t pairs, k, split, act;
};

// g = gate_row · x, u = up_row · x over this lane's words of [lo, hi).
__device__ __forceinline__ void dot_gate_up(const uint4* gr, const uint4* ur, const uint4* x,
                                            int64_t lo, int64_t hi, int lane, float& g, float& u) {
  for (int64_t c0 = lo + lane; c0 < hi; c0 += 32 * kUnroll) {
    uint4 gv[kUnroll], uv[kUnroll];
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t c = c0 + q * 32;
      gv[q] = c < hi ? ld_stream(gr + c) : make_uint4(0, 0, 0, 0);
      uv[q] = c < hi ? ld_stream(ur + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t c = c0 + q * 32;
      if (c < hi) {
        const uint4 xv = x[c];
        g += dot8(gv[q], xv);
        u += dot8(uv[q], xv);
      }
    }
  }
}

__global__ void __launch_bounds__(kWarps * 32) up_kernel(const UpArgs a, int64_t n_groups) {
  __shared__ const uint4* gate_of[kMaxPairs];
  __shared__ const uint4* up_of[kMaxPairs];
  pdl_trigger();
  pdl_wait();  // the routing (ids) and x come from earlier kernels of the step
  for (int p = threadIdx.x; p < a.pairs; p += blockDim.x) {
    const int32_t e = a.ids[p];
    gate_of[p] = expert_mat(a.gate, e);
    up_of[p] = expert_mat(a.up, e);
  }
  __syncthreads();
  const RowSplit s(a.split, a.in8);
  const int64_t total = int64_t(a.pairs) * a.rows;
  // Persistent blocks walk groups of (row, pair) work rows, row-major over the pairs.
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    const int64_t wr = group * s.rows_per_block + s.slot;
    const bool live = wr < total;
    const int64_t row = live ? wr / a.pairs : 0;
    const int p = live ? int(wr - row * a.pairs) : 0;
    float v[2] = {0.0f, 0.0f};
    if (live)
      dot_gate_up(gate_of[p] + row * a.in8, up_of[p] + row * a.in8, a.x + (p / a.k) * a.in8, s.lo,
                  s.hi, s.lane, v[0], v[1]);
    v[0] = warp_sum(v[0]);
    v[1] = warp_sum(v[1]);
    combine_pieces<2>(v, s, a.split);
    if (live && s.lane == 0 && s.piece == 0)
      a.h[p * a.rows + row] = __float2bfloat16(activation_f(a.act, v[0]) * v[1]);
  }
}

struct DownArgs {
  const uint4* h;        // [pairs, in8] bf16
  const int32_t* ids;    // [pairs]
  const float* weights;  // [pairs]
  MoeMat down;           // per expert [rows, in8] bf16
  void* y;               // [n, rows]
  int64_t in8, rows;     // I / 8, H
  int32_t n, k, split, ydt;
};

// Σ over this lane's words f of [lo, hi) of the flattened (slot, column) space of token t's
// row `row`: weight_j · (down_{e_j}[row] · h[t·k + j]), word f being column f mod in8 of slot
// f / in8. A fixed order per lane, so the sum is the same on every run.
__device__ __forceinline__ float dot_down(const DownArgs& a, const uint4* const* down_of,
                                          const float* weight_of, int64_t t, int64_t row,
                                          int64_t lo, int64_t hi, int lane) {
  float acc = 0.0f;
  for (int64_t f0 = lo + lane; f0 < hi; f0 += 32 * kUnroll) {
    uint4 wv[kUnroll];
    int64_t pair[kUnroll], col[kUnroll];
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t f = f0 + q * 32;
      const int64_t j = f < hi ? f / a.in8 : 0;
      pair[q] = t * a.k + j;
      col[q] = f - j * a.in8;
      wv[q] = f < hi ? ld_stream(down_of[pair[q]] + row * a.in8 + col[q]) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int q = 0; q < kUnroll; ++q)
      if (f0 + q * 32 < hi) acc += weight_of[pair[q]] * dot8(wv[q], a.h[pair[q] * a.in8 + col[q]]);
  }
  return acc;
}

__global__ void __launch_bounds__(kWarps * 32) down_kernel(const DownArgs a, int64_t n_groups) {
  __shared__ const uint4* down_of[kMaxPairs];
  __shared__ float weight_of[kMaxPairs];
  pdl_trigger();
  pdl_wait();  // the routing and h come from earlier kernels
  const int pairs = a.n * a.k;
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    down_of[p] = expert_mat(a.down, a.ids[p]);
    weight_of[p] = a.weights[p];
  }
  __syncthreads();
  const RowSplit s(a.split, int64_t(a.k) * a.in8);
  const int64_t total = int64_t(a.n) * a.rows;
  // Work rows are row-major over the tokens: tokens sharing an expert read its row together.
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    const int64_t wr = group * s.rows_per_block + s.slot;
    const bool live = wr < total;
    const int64_t row = live ? wr / a.n : 0, t = live ? wr - row * a.n : 0;
    float v[1] = {live ? dot_down(a, down_of, weight_of, t, row, s.lo, s.hi, s.lane) : 0.0f};
    v[0] = warp_sum(v[0]);
    combine_pieces<1>(v, s, a.split);
    if (live && s.lane == 0 && s.piece == 0) st(a.y, a.ydt, t * a.rows + row, v[0]);
  }
}

// --- prefill combine ---

__global__ void combine_kernel(void* y, int ydt, const void* o, int odt, const int32_t* pos,
                               const float* weights, int64_t n, int64_t cols, int32_t k) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * cols;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, c = i - t * cols;
    float acc = 0.0f;
    for (int32_t j = 0; j < k; ++j)
      acc += weights[t * k + j] * ld(o, odt, int64_t(pos[t * k + j]) * cols + c);
    st(y, ydt, i, acc);
  }
}

// --- launch helpers ---

}  // namespace

bool moe_route_fits(int64_t n_expert, int64_t k) {
  return n_expert >= 1 && n_expert <= kMoeMaxExperts && k >= 1 && k <= n_expert &&
         k <= kMoeMaxRouted;
}

void moe_route(Ctx& ctx, const Ten& logits, const Ten& ids, const Ten& weights,
               int32_t norm_topk_prob) {
  const int64_t n = logits.rows();
  const unsigned grid = unsigned((n + kWarps - 1) / kWarps);
  launch_pdl(ctx, route_kernel, dim3(grid), dim3(kWarps * 32), 0,
             static_cast<const float*>(logits.p), static_cast<int32_t*>(ids.p),
             static_cast<float*>(weights.p), n, int32_t(logits.cols()), int32_t(ids.cols()),
             norm_topk_prob);
  HEARTH_CUDA_LAUNCHED();
}

bool moe_decode_fits(const Ten& x, const Ten& h, int64_t k) {
  return x.rows() <= kMoeDecodeTokens && k <= kMoeDecodeUsed && x.dtype == kBF16 &&
         h.dtype == kBF16 && x.cols() % 8 == 0 && h.cols() % 8 == 0 && aligned16(x.p) &&
         aligned16(h.p) && h.rows() == x.rows() * k;
}

void moe_decode(Ctx& ctx, const Ten& y, const Ten& x, const Ten& ids, const Ten& weights,
                const MoeMat& gate, const MoeMat& up, const MoeMat& down, const Ten& h,
                int32_t act) {
  const int64_t n = x.rows(), k = ids.cols(), pairs = n * k, H = x.cols(), I = h.cols();
  const int up_per_sm = gemv_resident_blocks(reinterpret_cast<const void*>(up_kernel), 0);
  static const int down_per_sm =
      gemv_resident_blocks(reinterpret_cast<const void*>(down_kernel), 0);

  UpArgs ua{};
  ua.x = static_cast<const uint4*>(x.p);
  ua.ids = static_cast<const int32_t*>(ids.p);
  ua.gate = gate;
  ua.up = up;
  ua.h = static_cast<__nv_bfloat16*>(h.p);
  ua.in8 = H / 8;
  ua.rows = I;
  ua.pairs = int32_t(pairs);
  ua.k = int32_t(k);
  ua.split = gemv_split(ctx, pairs * I, ua.in8);
  ua.act = act;
  const int64_t up_groups = (pairs * I + kWarps / ua.split - 1) / (kWarps / ua.split);
  const int64_t up_grid = std::min<int64_t>(up_groups, int64_t(ctx.sm_count) * up_per_sm);
  launch_pdl(ctx, up_kernel, dim3(unsigned(up_grid)), dim3(kWarps * 32), 0, ua, up_groups);
  HEARTH_CUDA_LAUNCHED();

  DownArgs da{};
  da.h = static_cast<const uint4*>(h.p);
  da.ids = ua.ids;
  da.weights = static_cast<const float*>(weights.p);
  da.down = down;
  da.y = y.p;
  da.in8 = I / 8;
  da.rows = H;
  da.n = int32_t(n);
  da.k = int32_t(k);
  da.split = gemv_split(ctx, n * H, k * da.in8);
  da.ydt = y.dtype;
  const int64_t down_groups = (n * H + kWarps / da.split - 1) / (kWarps / da.split);
  const int64_t down_grid = std::min<int64_t>(down_groups, int64_t(ctx.sm_count) * down_per_sm);
  launch_pdl(ctx, down_kernel, dim3(unsigned(down_grid)), dim3(kWarps * 32), 0, da, down_groups);
  HEARTH_CUDA_LAUNCHED();
}

void moe_combine(Ctx& ctx, const Ten& y, const Ten& o, const int32_t* pos, const Ten& weights) {
  const int64_t n = y.rows(), cols = y.cols();
  launch_pdl(ctx, combine_kernel, dim3(grid_for(n * cols, 256)), dim3(256), 0, y.p, y.dtype, o.p,
             o.dtype, pos, static_cast<const float*>(weights.p), n, cols, int32_t(weights.cols()));
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
