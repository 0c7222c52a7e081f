// y[n, out] = x[n, in] · w[out, in]ᵀ (+ bias): the matrix products of every layer.
// - n ≤ ctx.gemv_max_rows rows (decode: 8 for one sequence, fewer in a step of several): our
//   own GEMV (gemv.cu), which reads the matrix exactly once per step; a plain per-row kernel
//   here for odd dtypes or alignment.
// - more rows (prefill, steps of several sequences), bf16 weights and activations: cuBLASLt,
//   f32 accumulation, bf16 or f32 out; one plan per shape, cached (heuristic queried once).
// - anything else (F16/F32 weights, odd alignment): a plain tiled kernel, correct but slow.
// Bias, when present, is added by the GEMV itself or by a small kernel after the GEMM.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kGemvWarps = 8;

// Any dtypes, any alignment; one warp per (output row), all n rows.
__global__ void gemv_generic_kernel(void* y, int ydt, const void* x, int xdt, const void* w,
                                    int wdt, const void* bias, int bdt, int64_t n, int64_t out,
                                    int64_t in) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kGemvWarps + (threadIdx.x >> 5);
  if (row >= out) return;
  for (int64_t r = 0; r < n; ++r) {
    float acc = 0.0f;
    for (int64_t c = lane; c < in; c += 32)
      acc += ld(w, wdt, row * in + c) * ld(x, xdt, r * in + c);
    acc = warp_sum(acc);
    if (lane == 0) st(y, ydt, r * out + row, acc + (bias ? ld(bias, bdt, row) : 0.0f));
  }
}

// Plain shared-memory tiled product for the rare non-bf16 prefill case.
constexpr int kTile = 16;
__global__ void gemm_tiled_kernel(void* y, int ydt, const void* x, int xdt, const void* w, int wdt,
                                  const void* bias, int bdt, int64_t n, int64_t out, int64_t in) {
  __shared__ float xs[kTile][kTile + 1], ws[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r = int64_t(blockIdx.y) * kTile + ty, o = int64_t(blockIdx.x) * kTile + tx;
  float acc = 0.0f;
  for (int64_t k0 = 0; k0 < in; k0 += kTile) {
    const int64_t xr = int64_t(blockIdx.y) * kTile + ty, wr = int64_t(blockIdx.x) * kTile + ty;
    xs[ty][tx] = (xr < n && k0 + tx < in) ? ld(x, xdt, xr * in + k0 + tx) : 0.0f;
    ws[ty][tx] = (wr < out && k0 + tx < in) ? ld(w, wdt, wr * in + k0 + tx) : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += xs[ty][k] * ws[tx][k];
    __syncthreads();
  }
  if (r < n && o < out) st(y, ydt, r * out + o, acc + (bias ? ld(bias, bdt, o) : 0.0f));
}

__global__ void add_bias_kernel(void* y, int ydt, const void* bias, int bdt, int64_t n,
                                int64_t out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * out;
       i += int64_t(gridDim.x) * blockDim.x)
    st(y, ydt, i, ld(y, ydt, i) + ld(bias, bdt, i % out));
}

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
};

// (n, out, in, y dtype, alignment, y's row stride, W stored transposed)
using PlanKey = std::tuple<int64_t, int64_t, int64_t, int32_t, int, int64_t, bool>;
std::mutex g_plans_mutex;
std::map<PlanKey, Plan>& plans() {
  static std::map<PlanKey, Plan> p;
  return p;
}

int alignment_of(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  for (int a : {16, 8, 4})
    if (v % uintptr_t(a) == 0) return a;
  return 2;
}

// Column-major view: D[out, n] = op(W)[out, in] · X[in, n], W stored as [in, out] col-major
// (row-major [out, in]; op T), or transposed ([out, in] col-major, op N). D's columns are ldy
// apart (y's row stride).
const Plan& plan_for(Ctx& ctx, int64_t n, int64_t out, int64_t in, int32_t ydt, int align,
                     int64_t ldy, bool transposed) {
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  Plan& p = plans()[{n, out, in, ydt, align, ldy, transposed}];
  if (p.op) return p;
  const cudaDataType_t dt = ydt == kF32 ? CUDA_R_32F : CUDA_R_16BF;
  HEARTH_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = transposed ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
  HEARTH_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  HEARTH_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  if (transposed)
    HEARTH_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(out), uint64_t(in), out));
  else
    HEARTH_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, uint64_t(in), uint64_t(out), in));
  HEARTH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, uint64_t(in), uint64_t(n), in));
  HEARTH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, dt, uint64_t(out), uint64_t(n), ldy));
  cublasLtMatmulPreference_t pref;
  HEARTH_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = ctx.lt_workspace_bytes;
  HEARTH_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const uint32_t al = uint32_t(align);
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    HEARTH_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof al));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(ctx.lt, p.op, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (p.ok) p.algo = result.algo;
  return p;
}

}  // namespace

void linear_plans_clear() {
  std::lock_guard<std::mutex> lock(g_plans_mutex);
  for (auto& [key, p] : plans()) {
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.c) cublasLtMatrixLayoutDestroy(p.c);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
  }
  plans().clear();
}

namespace {
const Plan& accumulate_plan(Ctx& ctx, const Ten& x, const Ten& in, const Ten& w) {
  const int align = std::min({alignment_of(x.p), alignment_of(in.p), alignment_of(w.p)});
  return plan_for(ctx, in.rows(), w.d[0], in.cols(), x.dtype, align, w.d[0], false);
}
}  // namespace

bool linear_accumulate_fits(Ctx& ctx, const Ten& x, const Ten& in, const Ten& w) {
  if (ctx.fixed_order || in.rows() <= ctx.gemv_max_rows || in.dtype != kBF16 || w.dtype != kBF16 ||
      x.dtype != kBF16)
    return false;
  return accumulate_plan(ctx, x, in, w).ok;
}

void linear_accumulate(Ctx& ctx, const Ten& x, const Ten& in, const Ten& w, float scale) {
  const Plan& p = accumulate_plan(ctx, x, in, w);
  // D = scale · (W·in) + 1 · C with C = D = x: the residual add rides in the GEMM's epilogue.
  // The product is added before rounding to bf16 (the composed form rounds it first).
  const float beta = 1.0f;
  HEARTH_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, p.op, &scale, w.p, p.a, in.p, p.b, &beta, x.p, p.c,
                                     x.p, p.c, &p.algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                                     ctx.stream));
}

bool linear_grouped(Ctx& ctx, const void* const* ptrs, const int* rows, int count, int64_t out,
                    int64_t in) {
  if (count <= 0) return true;
#if CUBLAS_VERSION < 120500  // the grouped API arrived in cuBLAS 12.5
  (void)ptrs, (void)rows, (void)out, (void)in;
  return false;
#else
  if (!ctx.blas) {
    if (cublasCreate(&ctx.blas) != CUBLAS_STATUS_SUCCESS) {
      ctx.blas = nullptr;
      return false;
    }
    HEARTH_CUBLAS_CHECK(cublasSetWorkspace(ctx.blas, ctx.lt_workspace, ctx.lt_workspace_bytes));
  }
  HEARTH_CUBLAS_CHECK(cublasSetStream(ctx.blas, ctx.stream));
  // Row-major Y = X·Wᵀ is column-major Yᵀ[out, rows] = W[in, out]ᵀ · Xᵀ[in, rows]: every group
  // is one problem (group_size 1) with its own row count.
  const size_t c = size_t(count);
  std::vector<cublasOperation_t> ta(c, CUBLAS_OP_T), tb(c, CUBLAS_OP_N);
  std::vector<int> m(c, int(out)), k(c, int(in)), lda(c, int(in)), ldb(c, int(in)),
      ldc(c, int(out)), size(c, 1);
  std::vector<int> n(rows, rows + count);
  std::vector<float> alpha(c, 1.0f), beta(c, 0.0f);
  const cublasStatus_t st = cublasGemmGroupedBatchedEx(
      ctx.blas, ta.data(), tb.data(), m.data(), n.data(), k.data(), alpha.data(), ptrs, CUDA_R_16BF,
      lda.data(), ptrs + count, CUDA_R_16BF, ldb.data(), beta.data(),
      const_cast<void* const*>(ptrs + 2 * count), CUDA_R_16BF, ldc.data(), count, size.data(),
      CUBLAS_COMPUTE_32F);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) return false;
  HEARTH_CUBLAS_CHECK(st);
  return true;
#endif
}

void linear_prepare(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w) {
  const int64_t n = x.rows();
  if (n <= ctx.gemv_max_rows || x.dtype != kBF16 || w.dtype != kBF16 ||
      (y.dtype != kBF16 && y.dtype != kF32))
    return;
  const int align = std::min({alignment_of(x.p), alignment_of(w.p), alignment_of(y.p)});
  plan_for(ctx, n, w.d[0], x.cols(), y.dtype, align, w.d[0], false);
}

void linear(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, const Ten& bias) {
  const int64_t n = x.rows(), in = x.cols(), out = w.d[0];
  const bool bf16 = x.dtype == kBF16 && w.dtype == kBF16;
  const bool vec = bf16 && in % 8 == 0 && aligned16(x.p) && aligned16(w.p);
  if (n <= ctx.gemv_max_rows) {
    const unsigned blocks = unsigned((out + kGemvWarps - 1) / kGemvWarps);
    if (vec) {
      gemv_one(ctx, y, x, GemvWeight(w), bias);
      return;
    } else {
      gemv_generic_kernel<<<blocks, kGemvWarps * 32, 0, ctx.stream>>>(
          y.p, y.dtype, x.p, x.dtype, w.p, w.dtype, bias.p, bias.dtype, n, out, in);
    }
    HEARTH_CUDA_LAUNCHED();
    return;
  }
  if (bf16 && (y.dtype == kBF16 || y.dtype == kF32) && !ctx.fixed_order) {
    const int align = std::min({alignment_of(x.p), alignment_of(w.p), alignment_of(y.p)});
    const Plan& p = plan_for(ctx, n, out, in, y.dtype, align, out, false);
    if (p.ok) {
      const float alpha = 1.0f, beta = 0.0f;
      HEARTH_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, p.op, &alpha, w.p, p.a, x.p, p.b, &beta, y.p, p.c,
                                         y.p, p.c, &p.algo, ctx.lt_workspace,
                                         ctx.lt_workspace_bytes, ctx.stream));
      if (!bias.empty()) {
        add_bias_kernel<<<grid_for(n * out, 256), 256, 0, ctx.stream>>>(y.p, y.dtype, bias.p,
                                                                        bias.dtype, n, out);
        HEARTH_CUDA_LAUNCHED();
      }
      return;
    }
  }
  dim3 grid(unsigned((out + kTile - 1) / kTile), unsigned((n + kTile - 1) / kTile));
  gemm_tiled_kernel<<<grid, dim3(kTile, kTile), 0, ctx.stream>>>(
      y.p, y.dtype, x.p, x.dtype, w.p, w.dtype, bias.p, bias.dtype, n, out, in);
  HEARTH_CUDA_LAUNCHED();
}

void linear_rows(Ctx& ctx, const Ten& y, const Ten& x, const void* w, int64_t rows, int64_t col0,
                 bool transposed) {
  // y's row stride: all of a row's outputs (y may be shaped [n, heads, head_dim]).
  const int64_t n = x.rows(), in = x.cols(), ldy = y.numel() / n;
  void* yp = static_cast<char*>(y.p) + col0 * (y.dtype == kF32 ? 4 : 2);
  if (x.dtype != kBF16 || (y.dtype != kBF16 && y.dtype != kF32))
    cuda_fail("linear_rows", "bf16 input and a bf16 or f32 output are needed", __FILE__, __LINE__);
  const int align = std::min({alignment_of(x.p), alignment_of(w), alignment_of(yp)});
  const Plan& p = plan_for(ctx, n, rows, in, y.dtype, align, ldy, transposed);
  if (!p.ok) cuda_fail("cublasLtMatmulAlgoGetHeuristic", "no algorithm", __FILE__, __LINE__);
  const float alpha = 1.0f, beta = 0.0f;
  HEARTH_CUBLAS_CHECK(cublasLtMatmul(ctx.lt, p.op, &alpha, w, p.a, x.p, p.b, &beta, yp, p.c, yp,
                                     p.c, &p.algo, ctx.lt_workspace, ctx.lt_workspace_bytes,
                                     ctx.stream));
}

void add_bias(Ctx& ctx, const Ten& y, const Ten& bias) {
  const int64_t out = y.cols(), n = y.rows();
  add_bias_kernel<<<grid_for(n * out, 256), 256, 0, ctx.stream>>>(y.p, y.dtype, bias.p, bias.dtype,
                                                                  n, out);
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace hearth::cuda
