// The decode GEMV (n ≤ 8 activation rows, bf16 activations), generic over the weight's format:
// bf16 rows (gemv.cu), MLX affine codes (gemv_affine.cu) and trellis codes coded along the rows
// (gemv_trellis.cu) run this one kernel, so each format gets the same fusions for free. Decode is
// bound by reading the weights, so every byte of each matrix is read exactly once per step,
// with many loads per lane in flight; packed codes are decoded in registers and never written.
//
// One launch serves several matrices that share the input (q, k and v; or gate and up with the
// GLU applied before the store), so a layer's attention inputs cost one launch and its MLP input
// one launch, and small matrices ride in the same wave as big ones. The launches that begin and
// end a residual block absorb the work around them, so a decode layer has no separate norm or
// add pass:
// - input norm: x arrives un-normalised; every block computes rms_norm(x) * gain itself into
//   shared memory (x is a few KB, read from L2) while its first weights are already in flight;
//   packed formats stage x in shared memory this way even without a norm, in the layout they
//   read fastest, with each input row's sum (XIn below);
// - residual: instead of storing y, the owner of an output row adds it into the residual
//   stream (x += rounded(y) * scale), exactly what the separate add would have computed.
//
// Work split: a block of 8 warps owns 8/W output rows; W warps share a row, each taking a
// contiguous 1/W of its columns, and their partial sums meet in shared memory. W (1, 2, 4 or 8)
// is chosen so that the launch has enough warps to keep every SM streaming: a 1024-row matrix
// on 132 SMs would otherwise give each SM only 8 warps.
//
// A format F reads a row in units, one per lane and pass (kUnroll units per lane in flight):
//   kWeights     weights per unit (a multiple of 8: the unit's input is kWeights/8 16-byte words)
//   kAlign       a warp's column range starts at a multiple of this many units (a trellis block
//                is decoded by a whole warp, 32 units)
//   kExactRows   the kernel is instantiated for the exact row count (bf16), or for a maximum
//                with the count a.n read at run time (packed formats: fewer instances)
//   Word         what one unit's load brings (codes and the group's parameters)
//   load / none  the unit's words (none: a lane past the row's end)
//   accumulate   acc[r] += the unit's weights · x[r]'s, for the rows present (from x staged in
//                shared memory, or read where the caller left it)
//   kStaged      x is staged in shared memory whenever it fits (packed formats)
//   kSumsX       finish needs each staged input row's Σx (trellis)
//   x_slot       where a staged x word goes (a layout in which the warp's loads are conflict-free)
//   finish       the row's sum from acc and the staged input row's Σx (trellis sums carry an
//                offset of 1534 per weight, taken off once per row)
//   row_scale    a factor of the whole row's sum (a trellis row's scale), 1 otherwise
#pragma once
#include <algorithm>
#include <type_traits>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda::gemv {

// Blocks of this many warps; the input norm stages at most kMaxNormBytes (n rows × in × 2) of
// normalised input in shared memory.
constexpr int kWarps = 8;
constexpr size_t kMaxNormBytes = 96 * 1024;
// Units per lane in flight per matrix: 4 16-byte bf16 loads beat 8 on the H200.
constexpr int kUnroll = 4;

// Where the kernel reads its input: x as the caller left it (global memory, through L1); x
// staged in shared memory by each block (F::x_slot's layout, with each row's Σx); or staged
// after rms_norm(x) * (norm_w + offset), the fused input norm.
enum XIn { kXGlobal, kXStaged, kXNorm };

// One matrix of a segment: bf16 rows, or codes with their scales (and affine biases).
struct Mat {
  const void* w;
  const void* scales;
  const void* biases;
};

struct Seg {
  Mat m, m2;  // m2: GLU's up matrix, same shape and format
  void* y;    // [n, rows]; unused when resid is set
  const void* bias;
  const void* bias2;
  void* resid;  // set: resid[n, rows] += rounded(x·wᵀ + bias) * rscale instead of storing y
  int64_t rows;
  int64_t first_block;  // its first row group
  int32_t ydt, bdt, bdt2, rdt;
  float rscale;
  int32_t pad;
};

struct Args {
  Seg seg[kGemvMaxSegs];
  int32_t n_seg;
  int32_t split;  // W: warps per row
  int32_t act;
  int32_t n;       // input rows (at most the kernel's N)
  const uint4* x;  // [n, in8]
  int64_t in8;
  // Packed formats: shared by every segment of a launch (the launcher checks).
  int32_t group, param_dt;
  // NORM kernels: x is un-normalised; the product's input is rms_norm(x) * (norm_w + offset).
  const void* norm_w;
  int32_t norm_wdt;
  float norm_eps, norm_offset;
  int32_t pad2;
};

// The segment (matrix) that owns row group `i`: the last one whose first_block is at most i.
__device__ __forceinline__ int seg_of(const Args& a, int64_t i) {
  int s = 0;
#pragma unroll
  for (int k = 1; k < kGemvMaxSegs; ++k)
    if (k < a.n_seg && i >= a.seg[k].first_block) s = k;
  return s;
}

// Stages the block's input rows in shared memory: xs[r][F::x_slot(i)] = x[r][i], or with NORM
// bf16(x[r][i] * inv_rms(x[r]) * (w[i] + offset)) (the same arithmetic as rms_norm, norm.cu, so
// the product sees the values the norm would have stored); with F::kSumsX, xsum[r] = Σ of the
// staged values in f32, in the block's fixed reduction order.
template <class F, bool NORM>
__device__ void stage_input(const Args& a, int rows, uint4* xs, float* xsum) {
  const float len = float(a.in8 * 8);
  for (int r = 0; r < rows; ++r) {
    const uint4* xr = a.x + r * a.in8;
    float inv = 1.0f;
    if constexpr (NORM) {
      float ss = 0.0f;
      for (int64_t i = threadIdx.x; i < a.in8; i += blockDim.x) ss = add_squares_bf16x8(xr[i], ss);
      inv = rsqrtf(block_sum(ss) / len + a.norm_eps);
    }
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < a.in8; i += blockDim.x) {
      const uint4 v =
          NORM ? scale_bf16x8(xr[i], inv, a.norm_w, a.norm_wdt, i * 8, a.norm_offset) : xr[i];
      xs[r * a.in8 + F::x_slot(i, a.in8)] = v;
      if constexpr (F::kSumsX) sum = sum_bf16x8(v, sum);
    }
    if constexpr (F::kSumsX) {
      sum = block_sum(sum);
      if (threadIdx.x == 0) xsum[r] = sum;
    }
  }
}

template <class F, int N, bool GLU, XIn XIN>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const Args a, int64_t n_groups) {
  using Word = typename F::Word;
  constexpr bool kStage = XIN != kXGlobal;
  extern __shared__ uint4 xs[];  // staged: the (normalised) input [n][in8]
  __shared__ float part[kWarps][GLU ? 2 * N : N];
  __shared__ float xsum[N];
  const int n = F::kExactRows ? N : a.n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = kWarps / a.split;
  const int slot = warp / a.split, piece = warp % a.split;
  // This warp's unit range [c_lo, c_hi) of a row.
  const int64_t units = a.in8 * 8 / F::kWeights;
  const int64_t len = ((units + a.split - 1) / a.split + F::kAlign - 1) / F::kAlign * F::kAlign;
  const int64_t c_lo = piece * len, c_hi = min(units, c_lo + len);
  pdl_trigger();
  bool waited = false;
  // Staged: the block's first batch of weights, loaded into registers before the wait (the
  // whole block stages x after it, so without them no weight would be in flight until the
  // input is in shared memory; requesting them only into L2 was slower: 8B tg128 210.2
  // against 217.7 t/s).
  Word pre_w[kUnroll], pre_u[GLU ? kUnroll : 1];
  bool preloaded = false;
  if constexpr (kStage) {
    const Seg& g = a.seg[seg_of(a, blockIdx.x)];
    const int64_t row = (blockIdx.x - g.first_block) * rows_per_block + slot;
    if (row < g.rows) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c_lo + lane + u * 32;
        pre_w[u] = c < c_hi ? F::load(g.m, a, row, c, lane) : F::none();
        if constexpr (GLU) pre_u[u] = c < c_hi ? F::load(g.m2, a, row, c, lane) : F::none();
      }
      preloaded = true;
    }
    pdl_wait();
    waited = true;
    stage_input<F, XIN == kXNorm>(a, n, xs, xsum);
    __syncthreads();
  }
  const uint4* xb = kStage ? xs : a.x;
  // Persistent blocks: as many as fit on the GPU at once, each walking groups of rows, so no
  // partial last wave leaves SMs idle (a 6144-row matrix is 1.45 waves of one-shot blocks).
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    const Seg& g = a.seg[seg_of(a, group)];
    const int64_t row = (group - g.first_block) * rows_per_block + slot;
    const bool live = row < g.rows;
    float acc[N], acc2[N];
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] = acc2[r] = 0.0f;
    // The first batch of weight loads is issued before pdl_wait(): weights are never written,
    // so they stream in while the previous kernel (the norm producing x) finishes.
    for (int64_t c0 = c_lo + lane; live && c0 < c_hi; c0 += 32 * kUnroll) {
      Word wv[kUnroll], uv[GLU ? kUnroll : 1];
      // The first batch of the first group (row blockIdx.x's, columns from c_lo + lane) is
      // the one preloaded above.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        if (preloaded) {
          wv[u] = pre_w[u];
          if constexpr (GLU) uv[u] = pre_u[u];
        } else {
          wv[u] = c < c_hi ? F::load(g.m, a, row, c, lane) : F::none();
          if constexpr (GLU) uv[u] = c < c_hi ? F::load(g.m2, a, row, c, lane) : F::none();
        }
      }
      preloaded = false;
      if (!waited) {
        pdl_wait();
        waited = true;
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        if (c < c_hi) {  // uniform across the warp when kAlign is 32
          F::template accumulate<N, kStage>(wv[u], a, n, lane, xb, c, acc);
          if constexpr (GLU) F::template accumulate<N, kStage>(uv[u], a, n, lane, xb, c, acc2);
        }
      }
    }
    preloaded = false;  // (also when this lane had no columns of the first row)
    if (!waited) {      // every thread waits before any write
      pdl_wait();
      waited = true;
    }
#pragma unroll
    for (int r = 0; r < N; ++r) {
      acc[r] = warp_sum(acc[r]);
      if constexpr (GLU) acc2[r] = warp_sum(acc2[r]);
    }
    if (a.split > 1) {
      if (lane == 0) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          part[warp][r] = acc[r];
          if constexpr (GLU) part[warp][N + r] = acc2[r];
        }
      }
      __syncthreads();
      if (piece == 0) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          for (int p = 1; p < a.split; ++p) {
            acc[r] += part[warp + p][r];
            if constexpr (GLU) acc2[r] += part[warp + p][N + r];
          }
        }
      }
      __syncthreads();  // part[] is rewritten by the next group
    }
    if (live && lane == 0 && piece == 0) {
      const float b = g.bias ? ld(g.bias, g.bdt, row) : 0.0f;
      const float mult = F::row_scale(g.m, row);
      if constexpr (GLU) {
        const float b2 = g.bias2 ? ld(g.bias2, g.bdt2, row) : 0.0f;
        const float mult2 = F::row_scale(g.m2, row);
#pragma unroll
        for (int r = 0; r < N; ++r) {
          if (r >= n) break;
          const float s1 = F::template finish<kStage>(acc[r], xsum[r]);
          const float s2 = F::template finish<kStage>(acc2[r], xsum[r]);
          st(g.y, g.ydt, r * g.rows + row, activation_f(a.act, s1 * mult + b) * (s2 * mult2 + b2));
        }
      } else if (g.resid) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          if (r >= n) break;
          const int64_t i = r * g.rows + row;
          const float s1 = F::template finish<kStage>(acc[r], xsum[r]);
          st(g.resid, g.rdt, i, ld(g.resid, g.rdt, i) + rounded(g.ydt, s1 * mult + b) * g.rscale);
        }
      } else {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          if (r >= n) break;
          st(g.y, g.ydt, r * g.rows + row, F::template finish<kStage>(acc[r], xsum[r]) * mult + b);
        }
      }
    }
  }
  if (!waited) pdl_wait();
}

// Allows the staged variants of format F and row count N their shared memory.
template <class F, int N>
void allow_norm_smem() {
  auto allow = [](const void* kernel) {
    HEARTH_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(kMaxNormBytes)));
  };
  allow(reinterpret_cast<const void*>(gemv_kernel<F, N, false, kXNorm>));
  allow(reinterpret_cast<const void*>(gemv_kernel<F, N, true, kXNorm>));
  if constexpr (F::kStaged) {
    allow(reinterpret_cast<const void*>(gemv_kernel<F, N, false, kXStaged>));
    allow(reinterpret_cast<const void*>(gemv_kernel<F, N, true, kXStaged>));
  }
}

template <class F, int N, bool GLU>
void launch_n(Ctx& ctx, Args& a, int64_t blocks) {
  const size_t x_bytes = size_t(a.n) * size_t(a.in8) * 16;
  const bool norm = a.norm_w != nullptr;
  const bool staged = norm || (F::kStaged && x_bytes <= kMaxNormBytes);
  const size_t smem = staged ? x_bytes : 0;
  auto go = [&](auto kernel) {
    const int64_t resident =
        int64_t(ctx.sm_count) * gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
    const unsigned grid = unsigned(std::min(blocks, resident));
    launch_pdl(ctx, kernel, dim3(grid), dim3(kWarps * 32), smem, a, blocks);
  };
  if (norm)
    go(gemv_kernel<F, N, GLU, kXNorm>);
  else if constexpr (F::kStaged)
    staged ? go(gemv_kernel<F, N, GLU, kXStaged>) : go(gemv_kernel<F, N, GLU, kXGlobal>);
  else
    go(gemv_kernel<F, N, GLU, kXGlobal>);
}

// Splits the rows over warps, numbers the segments' row groups and launches the kernel for
// a.n input rows (N = a.n for exact formats, else 1 or the maximum 8).
template <class F, bool GLU>
void launch(Ctx& ctx, Args& a, int64_t total_rows) {
  a.split = gemv_split(ctx, total_rows, a.in8 * 8 / F::kWeights);
  const int rows_per_block = kWarps / a.split;
  int64_t blocks = 0;
  for (int i = 0; i < a.n_seg; ++i) {
    a.seg[i].first_block = blocks;
    blocks += (a.seg[i].rows + rows_per_block - 1) / rows_per_block;
  }
  if constexpr (F::kExactRows) {
    switch (a.n) {
      case 1:
        return launch_n<F, 1, GLU>(ctx, a, blocks);
      case 2:
        return launch_n<F, 2, GLU>(ctx, a, blocks);
      case 3:
        return launch_n<F, 3, GLU>(ctx, a, blocks);
      case 4:
        return launch_n<F, 4, GLU>(ctx, a, blocks);
      case 5:
        return launch_n<F, 5, GLU>(ctx, a, blocks);
      case 6:
        return launch_n<F, 6, GLU>(ctx, a, blocks);
      case 7:
        return launch_n<F, 7, GLU>(ctx, a, blocks);
      default:
        return launch_n<F, 8, GLU>(ctx, a, blocks);
    }
  } else if (a.n == 1) {
    launch_n<F, 1, GLU>(ctx, a, blocks);
  } else {
    launch_n<F, 8, GLU>(ctx, a, blocks);
  }
}

// launch<F, GLU> with GLU chosen at run time, and the shared memory of a packed format's
// input-norm variants (its instances: one input row, or up to eight).
template <class F>
void launch_glu_or_not(Ctx& ctx, Args& a, int64_t total_rows, bool glu) {
  if (glu)
    launch<F, true>(ctx, a, total_rows);
  else
    launch<F, false>(ctx, a, total_rows);
}
template <class F>
void allow_packed_norm_smem() {
  allow_norm_smem<F, 1>();
  allow_norm_smem<F, 8>();
}

// The packed formats' launches (gemv_affine.cu, gemv_trellis.cu) and the allowance of their
// input-norm variants' shared memory (once, outside any graph capture).
void launch_affine(Ctx& ctx, Args& a, int64_t total_rows, int bits, bool glu);
void launch_trellis(Ctx& ctx, Args& a, int64_t total_rows, int k, bool glu);
void affine_init();
void trellis_init();

}  // namespace hearth::cuda::gemv
