// RMSNorm (plain, with weight_offset for the gemma-style 1 + w gains, per-head when w is shorter
// than a row) and the SiLU-gated RMSNorm of Gated DeltaNet. Sums of squares in f32. Short rows
// (per-head norms) take one warp each; long rows (hidden size) one block each, so a decode
// step's single row still spreads over many threads. y may alias x: each row is read completely
// (into registers) before it is written.
#include <algorithm>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

// Decode normalises one row per call, so a row's latency is what counts: every thread loads all
// its elements (up to kPer) into registers at once, the loads overlap, then one reduction and
// the writes from registers. Longer rows than kPer · threads re-read x (not seen in practice).
constexpr int kPer = 16;

__device__ __forceinline__ void norm_row(void* y, int ydt, const void* x, int xdt, const void* w,
                                         int wdt, int64_t base, int len, float eps, float offset,
                                         const void* z, int zdt, int tid, int n_threads,
                                         bool whole_block) {
  float v[kPer];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = tid + k * n_threads;
    v[k] = i < len ? ld(x, xdt, base + i) : 0.0f;
    ss += v[k] * v[k];
  }
  for (int i = tid + kPer * n_threads; i < len; i += n_threads) {
    const float t = ld(x, xdt, base + i);
    ss += t * t;
  }
  const float inv = rsqrtf((whole_block ? block_sum(ss) : warp_sum(ss)) / float(len) + eps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = tid + k * n_threads;
    if (i < len) {
      float o = v[k] * inv * (ld(w, wdt, i) + offset);
      if (z) o *= silu_f(ld(z, zdt, base + i));
      st(y, ydt, base + i, o);
    }
  }
  for (int i = tid + kPer * n_threads; i < len; i += n_threads) {
    float o = ld(x, xdt, base + i) * inv * (ld(w, wdt, i) + offset);
    if (z) o *= silu_f(ld(z, zdt, base + i));
    st(y, ydt, base + i, o);
  }
}

// One warp per row (rows up to 512 elements: per-head norms), kRowsPerBlock rows per block.
constexpr int kRowsPerBlock = 4;

__global__ void rms_norm_warp_kernel(void* y, int ydt, const void* x, int xdt, const void* w,
                                     int wdt, int64_t rows, int len, float eps, float offset,
                                     const void* z, int zdt) {
  pdl_trigger();
  pdl_wait();
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  norm_row(y, ydt, x, xdt, w, wdt, r * len, len, eps, offset, z, zdt, threadIdx.x & 31, 32, false);
}

// One block per row (hidden-size rows), about 4 elements per thread.
__global__ void rms_norm_block_kernel(void* y, int ydt, const void* x, int xdt, const void* w,
                                      int wdt, int len, float eps, float offset, const void* z,
                                      int zdt) {
  pdl_trigger();
  pdl_wait();
  norm_row(y, ydt, x, xdt, w, wdt, int64_t(blockIdx.x) * len, len, eps, offset, z, zdt, threadIdx.x,
           blockDim.x, true);
}

int threads_for(int len) { return std::min(1024, std::max(64, (len / 4 + 31) / 32 * 32)); }

void launch(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, float eps, float offset,
            const Ten* z) {
  const int len = int(w.numel());
  const int64_t rows = x.numel() / len;
  const void* zp = z ? z->p : nullptr;
  const int zdt = z ? z->dtype : 0;
  if (len <= 512) {
    launch_pdl(ctx, rms_norm_warp_kernel,
               dim3(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock)), dim3(32 * kRowsPerBlock),
               0, y.p, y.dtype, x.p, x.dtype, w.p, w.dtype, rows, len, eps, offset, zp, zdt);
  } else {
    const int threads = threads_for(len);
    launch_pdl(ctx, rms_norm_block_kernel, dim3(unsigned(rows)), dim3(threads), 0, y.p, y.dtype,
               x.p, x.dtype, w.p, w.dtype, len, eps, offset, zp, zdt);
  }
  HEARTH_CUDA_LAUNCHED();
}

}  // namespace

void rms_norm(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, float eps, float offset) {
  launch(ctx, y, x, w, eps, offset, nullptr);
}

// transformers' gated norm: weight * normalised(x), then * silu(z); no weight offset.
void rms_norm_gated(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, const Ten& z, float eps) {
  launch(ctx, y, x, w, eps, 0.0f, &z);
}

}  // namespace hearth::cuda
