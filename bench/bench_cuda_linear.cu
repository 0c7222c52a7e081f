// Products of a few rows, as a step of several decoding sequences runs them: hearth's GEMV
// (gemv.cu, the decode path of a single sequence, which multiplies each weight by every row's
// input) against the cuBLASLt GEMM (linear.cu) on the Qwen3-8B shape's matrices, at 1 to 256
// rows (the GEMV up to 8), and --deterministic's linear_fixed (linear_fixed.cu) beside them. Prints
// the time per product (median of reps, CUDA events, each product launched alone and timed as a
// graph of 32 launches on distinct weights so that none comes from L2) and the weight bytes per
// second. Where the GEMM wins sets kBatchGemvRows (cuda_backend_impl.h). Usage: bench_cuda_linear
// [reps]   (built only with CUDA)
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/common.h"
#include "cuda_graph_timing.cuh"

using hearth::cuda::Ctx;
using hearth::cuda::Ten;

namespace {

constexpr int kCopies = 32;  // distinct weight matrices per timed graph: 32 × ≥ 8 MB ≫ L2
constexpr int64_t kMaxRows = 256;

Ten tensor(void* p, int64_t rows, int64_t cols) {
  Ten t;
  t.p = p;
  t.dtype = hearth::cuda::kBF16;
  t.ndim = 2;
  t.d[0] = rows;
  t.d[1] = cols;
  return t;
}

// Median milliseconds of one product: `launch(copy)` for kCopies copies, captured once (the
// first launch, outside the capture, lets cuBLASLt pick its plan for the shape).
template <typename Launch>
double time_products(Ctx& ctx, int reps, Launch launch) {
  return graph_ms_per_call(ctx, kCopies, reps, launch);
}

void run(Ctx& ctx, const char* name, int64_t out, int64_t in, int reps) {
  const size_t w_bytes = size_t(out * in) * 2;
  std::vector<void*> w(kCopies);
  for (auto& p : w) {
    HEARTH_CUDA_CHECK(cudaMalloc(&p, w_bytes));
    HEARTH_CUDA_CHECK(cudaMemset(p, 0x3c, w_bytes));  // 0x3c3c: bf16 ~0.011
  }
  void *x = nullptr, *y = nullptr;
  HEARTH_CUDA_CHECK(cudaMalloc(&x, size_t(kMaxRows * in) * 2));
  HEARTH_CUDA_CHECK(cudaMemset(x, 0x3c, size_t(kMaxRows * in) * 2));
  HEARTH_CUDA_CHECK(cudaMalloc(&y, size_t(kMaxRows * out) * 2));
  std::printf("%-10s [%5lld x %5lld] %6.1f MB\n", name, static_cast<long long>(out),
              static_cast<long long>(in), double(w_bytes) / 1e6);
  std::printf("  rows |  GEMV us |  GB/s | GEMM us |  GB/s | fixed us |  GB/s\n");
  for (int64_t rows : {1, 2, 3, 4, 5, 6, 8, 12, 16, 32, 64, 128, 256}) {
    const Ten xt = tensor(x, rows, in), yt = tensor(y, rows, out);
    double gemv = 0;
    if (rows <= 8) {
      ctx.gemv_max_rows = 8;
      gemv = time_products(ctx, reps, [&](int c) {
        hearth::cuda::linear(ctx, yt, xt, tensor(w[size_t(c)], out, in), Ten());
      });
    }
    ctx.gemv_max_rows = 0;
    const double gemm = time_products(ctx, reps, [&](int c) {
      hearth::cuda::linear(ctx, yt, xt, tensor(w[size_t(c)], out, in), Ten());
    });
    const double fixed = time_products(ctx, reps, [&](int c) {
      hearth::cuda::linear_fixed(ctx, yt, out, xt, w[size_t(c)], out, Ten(), 1.0f, false);
    });
    if (rows <= 8)
      std::printf("  %4lld | %8.1f | %5.0f |", static_cast<long long>(rows), gemv * 1e3,
                  double(w_bytes) / gemv / 1e6);
    else
      std::printf("  %4lld |        - |     - |", static_cast<long long>(rows));
    std::printf(" %7.1f | %5.0f | %8.1f | %5.0f\n", gemm * 1e3, double(w_bytes) / gemm / 1e6,
                fixed * 1e3, double(w_bytes) / fixed / 1e6);
  }
  for (void* p : w) cudaFree(p);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device\n");
    return 0;
  }
  try {
    HEARTH_CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop{};
    HEARTH_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    Ctx ctx;
    HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking));
    HEARTH_CUBLAS_CHECK(cublasLtCreate(&ctx.lt));
    ctx.lt_workspace_bytes = 32u << 20;
    HEARTH_CUDA_CHECK(cudaMalloc(&ctx.lt_workspace, ctx.lt_workspace_bytes));
    ctx.sm_count = prop.multiProcessorCount;
    ctx.pdl = prop.major >= 9;
    hearth::cuda::gemv_init();
    hearth::cuda::linear_fixed_init();
    std::printf("%s, %d SMs; %d reps per row\n", prop.name, ctx.sm_count, reps);
    run(ctx, "q|k|v", 4096 + 2 * 1024, 4096, reps);
    run(ctx, "o", 4096, 4096, reps);
    run(ctx, "gate|up", 2 * 12288, 4096, reps);
    run(ctx, "down", 4096, 12288, reps);
    cudaFree(ctx.lt_workspace);
    cublasLtDestroy(ctx.lt);
    cudaStreamDestroy(ctx.stream);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_linear: %s\n", e.what());
    return 1;
  }
  return 0;
}
