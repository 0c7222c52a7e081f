// The decode products' launch arguments, shared by the register-streaming kernel (gemv.cu) and
// the bulk-copy kernel (gemv_bulk.cu).
#pragma once
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv.h"

namespace hearth::cuda {

// Every decode GEMV kernel runs blocks of this many warps; the input norm stages at most this
// many bytes (n rows × in × 2) of normalised input in shared memory.
constexpr int kGemvWarps = 8;
constexpr size_t kGemvMaxNormBytes = 96 * 1024;
// The warps per SM the kernels' work split aims for (48; HEARTH_GEMV_WARPS_PER_SM overrides).
int gemv_warps_per_sm();

struct GemvSeg {
  const uint4* w;   // [rows, in8]
  const uint4* w2;  // GLU: the up matrix, same shape
  void* y;          // [n, rows]; unused when resid is set
  const void* bias;
  const void* bias2;
  void* resid;  // set: resid[n, rows] += rounded(x·wᵀ + bias) * rscale instead of storing y
  int64_t rows;
  int64_t first_block;  // gemv_kernel: its first row group; gemv_bulk_kernel: its first row
  int32_t ydt, bdt, bdt2, rdt;
  float rscale;
  int32_t pad;
};

struct GemvArgs {
  GemvSeg seg[kGemvMaxSegs];
  int32_t n_seg;
  int32_t split;  // W: warps per row
  int32_t act;
  int32_t preload;  // NORM: first weights into registers before the wait (else into L2)
  const uint4* x;   // [n, in8]
  int64_t in8;
  // NORM kernels: x is un-normalised; the product's input is rms_norm(x) * (norm_w + offset).
  const void* norm_w;
  int32_t norm_wdt;
  float norm_eps, norm_offset;
  int32_t pad2;
};

// The segment (matrix) that owns unit `i` (a row group in gemv_kernel, a row in
// gemv_bulk_kernel): the last one whose first_block is at most i.
__device__ __forceinline__ int seg_of(const GemvArgs& a, int64_t i) {
  int s = 0;
#pragma unroll
  for (int k = 1; k < kGemvMaxSegs; ++k)
    if (k < a.n_seg && i >= a.seg[k].first_block) s = k;
  return s;
}

// xs[r][i] = bf16(x[r][i] · inv_rms(x[r]) · (w[i] + offset)) for the n activation rows, by the
// whole block: the same arithmetic as rms_norm (norm.cu), so a product sees the values the norm
// would have stored.
// Store(r, i, word) puts word i of row r wherever the kernel keeps it.
template <typename Store>
__device__ __forceinline__ void normalise_input(const GemvArgs& a, int n, Store store) {
  const float len = float(a.in8 * 8);
  for (int r = 0; r < n; ++r) {
    const uint4* xr = a.x + r * a.in8;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < a.in8; i += blockDim.x) ss = add_squares_bf16x8(xr[i], ss);
    const float inv = rsqrtf(block_sum(ss) / len + a.norm_eps);
    for (int64_t i = threadIdx.x; i < a.in8; i += blockDim.x)
      store(r, i, scale_bf16x8(xr[i], inv, a.norm_w, a.norm_wdt, i * 8, a.norm_offset));
  }
}
__device__ __forceinline__ void normalise_input(const GemvArgs& a, int n, uint4* xs) {
  normalise_input(a, n, [&](int r, int64_t i, const uint4& v) { xs[r * a.in8 + i] = v; });
}

// Stores activation row r's product for output row `row` of segment g, its bias added: the
// GLU's act(gate) · up, the residual add (resid += rounded(y) · rscale), or y itself.
template <bool GLU>
__device__ __forceinline__ void store_row(const GemvSeg& g, int act, int r, int64_t row, float acc,
                                          float acc2) {
  const int64_t i = r * g.rows + row;
  const float b = g.bias ? ld(g.bias, g.bdt, row) : 0.0f;
  if constexpr (GLU) {
    const float b2 = g.bias2 ? ld(g.bias2, g.bdt2, row) : 0.0f;
    st(g.y, g.ydt, i, activation_f(act, acc + b) * (acc2 + b2));
  } else if (g.resid) {
    st(g.resid, g.rdt, i, ld(g.resid, g.rdt, i) + rounded(g.ydt, acc + b) * g.rscale);
  } else {
    st(g.y, g.ydt, i, acc + b);
  }
}

// Whether the opt-in kernel k (Bulk or Mma) should take a launch it fits: pinned by
// gemv_set_kernel, or under Auto its switch (HEARTH_GEMV_BULK=1, HEARTH_GEMV_MMA=1) set.
bool gemv_takes(GemvKernel k);

// Raises `kernel`'s dynamic shared memory limit to `wanted` bytes, or to what the device allows
// beside the kernel's static arrays if that is less (sm_89 allows 99 KB per block, sm_80 163 KB,
// sm_90 227 KB); returns the limit set. Once per kernel, outside graph capture.
size_t allow_dynamic_smem(const void* kernel, size_t wanted);

// gemv_mma.cu: n ≤ 8 activation rows through the tensor-core kernel when it takes the call
// (HEARTH_GEMV_MMA=1); false leaves it to gemv_kernel.
bool gemv_mma(Ctx& ctx, GemvArgs a, int64_t n, bool glu);
void gemv_mma_init();

// gemv_bulk.cu: one activation row through the bulk-copy kernel when it takes the call (sm_90,
// HEARTH_GEMV_BULK=1, every row fits a pipeline stage); false leaves it to gemv_kernel.
// total_rows: the rows of all segments.
bool gemv_bulk(Ctx& ctx, GemvArgs a, int64_t total_rows, bool glu);
void gemv_bulk_init();

// gemv_ring.cu: n ≤ 8 activation rows through the cp.async-ring kernel when it takes the call
// (HEARTH_GEMV_RING=1); `a` as gemv_kernel takes it (split and row groups set), n_groups its
// row groups. false leaves it to gemv_kernel.
bool gemv_ring(Ctx& ctx, const GemvArgs& a, int64_t n, bool glu, int64_t n_groups);
void gemv_ring_init();

// gemv_even.cu: n ≤ 8 activation rows through the even-split kernel when it takes the call
// (HEARTH_GEMV_EVEN=1, ctx.gemv_ws set); total_rows: the rows of all segments. false leaves it
// to gemv_kernel.
bool gemv_even(Ctx& ctx, GemvArgs a, int64_t n, bool glu, int64_t total_rows);
void gemv_even_init();

}  // namespace hearth::cuda
