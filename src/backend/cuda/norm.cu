// RMSNorm (plain, with weight_offset for the gemma-style 1 + w gains, per-head when w is shorter
// than a row) and the SiLU-gated RMSNorm of Gated DeltaNet. Sums of squares in f32. Short rows
// (per-head norms) take one warp each; long rows (hidden size) one block each, so a decode
// step's single row still spreads over many threads. y may alias x: each row is read completely
// (into registers) before it is written.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

// Decode normalises one row per call, so a row's latency is what counts: every thread loads all
// its elements (up to kPer) into registers at once, the loads overlap, then one reduction and
// the writes from registers. Longer rows than kPer · threads re-read x (not seen in practice).
constexpr int kPer = 16;

// EARLY (the one-warp rows of per-head and gated norms): the gains and the gate are loaded with
// x, one round trip before the reduction instead of a second one after it. The block kernel
// does not: its 1024-thread blocks cannot hold the extra registers (it failed to launch at 72).
template <bool EARLY>
__device__ __forceinline__ void norm_row(void* y, int ydt, const void* x, int xdt, const void* w,
                                         int wdt, int64_t base, int len, float eps, float offset,
                                         const void* z, int zdt, int tid, int n_threads,
                                         bool whole_block) {
  float v[kPer], gw[EARLY ? kPer : 1], gz[EARLY ? kPer : 1];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = tid + k * n_threads;
    v[k] = i < len ? ld(x, xdt, base + i) : 0.0f;
    if constexpr (EARLY) {
      gw[k] = i < len ? ld(w, wdt, i) : 0.0f;
      gz[k] = z && i < len ? ld(z, zdt, base + i) : 0.0f;
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) ss += v[k] * v[k];
  for (int i = tid + kPer * n_threads; i < len; i += n_threads) {
    const float t = ld(x, xdt, base + i);
    ss += t * t;
  }
  const float inv = rsqrtf((whole_block ? block_sum(ss) : warp_sum(ss)) / float(len) + eps);
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int i = tid + k * n_threads;
    if (i < len) {
      float o;
      if constexpr (EARLY) {
        o = v[k] * inv * (gw[k] + offset);
        if (z) o *= silu_f(gz[k]);
      } else {
        o = v[k] * inv * (ld(w, wdt, i) + offset);
        if (z) o *= silu_f(ld(z, zdt, base + i));
      }
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
  norm_row<true>(y, ydt, x, xdt, w, wdt, r * len, len, eps, offset, z, zdt, threadIdx.x & 31, 32,
                 false);
}

// One block per row (hidden-size rows), about 4 elements per thread.
__global__ void rms_norm_block_kernel(void* y, int ydt, const void* x, int xdt, const void* w,
                                      int wdt, int len, float eps, float offset, const void* z,
                                      int zdt) {
  pdl_trigger();
  pdl_wait();
  norm_row<false>(y, ydt, x, xdt, w, wdt, int64_t(blockIdx.x) * len, len, eps, offset, z, zdt,
                  threadIdx.x, blockDim.x, true);
}

// Rows of bf16 (x, y and z) whose length is a multiple of 8, up to 8192: a thread owns 8
// consecutive elements, moved by one 16-byte access each way, instead of the generic kernel's
// per-element dtype dispatch. A prefill chunk normalises hundreds of hidden-size rows per call,
// and the generic form ran at a fifth of the memory bandwidth there. Same arithmetic as
// norm_row (f32 sum of squares, one rounding at the store); only the summation order differs.
template <typename Gain>
__global__ void rms_norm_bf16x8_kernel(uint4* y, const uint4* x, const Gain* w, int len8, float eps,
                                       float offset, const uint4* z) {
  pdl_trigger();
  pdl_wait();
  const int64_t i = int64_t(blockIdx.x) * len8 + threadIdx.x;
  const bool mine = int(threadIdx.x) < len8;
  float v[8];
  float ss = 0.0f;
  if (mine) {
    bf16x8_to_f32(x[i], v);
#pragma unroll
    for (int j = 0; j < 4; ++j) ss += v[2 * j] * v[2 * j] + v[2 * j + 1] * v[2 * j + 1];
  }
  const float inv = rsqrtf(block_sum(ss) / float(len8 * 8) + eps);
  if (!mine) return;
  float gate[8];
  if (z) {
    bf16x8_to_f32(z[i], gate);
#pragma unroll
    for (int j = 0; j < 8; ++j) gate[j] = silu_f(gate[j]);
  }
  uint4 out;
  __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
  const Gain* wr = w + int64_t(threadIdx.x) * 8;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float a = v[2 * j] * inv * (float(wr[2 * j]) + offset);
    float b = v[2 * j + 1] * inv * (float(wr[2 * j + 1]) + offset);
    if (z) {
      a *= gate[2 * j];
      b *= gate[2 * j + 1];
    }
    o[j] = __floats2bfloat162_rn(a, b);
  }
  y[i] = out;
}

// The 8-wide kernel applies: bf16 rows of a multiple of 8 up to 8192, 16-byte aligned, gains
// f32 or bf16, and the gains one row long (not per head).
bool fits_bf16x8(const Ten& y, const Ten& x, const Ten& w, const Ten* z, int len) {
  return len > 512 && len % 8 == 0 && len <= 8192 && y.dtype == kBF16 && x.dtype == kBF16 &&
         (w.dtype == kF32 || w.dtype == kBF16) && aligned16(y.p) && aligned16(x.p) &&
         (!z || (z->dtype == kBF16 && aligned16(z->p)));
}

int threads_for(int len) { return std::min(1024, std::max(64, (len / 4 + 31) / 32 * 32)); }

void launch(Ctx& ctx, const Ten& y, const Ten& x, const Ten& w, float eps, float offset,
            const Ten* z) {
  const int len = int(w.numel());
  const int64_t rows = x.numel() / len;
  const void* zp = z ? z->p : nullptr;
  const int zdt = z ? z->dtype : 0;
  if (fits_bf16x8(y, x, w, z, len)) {
    const int len8 = len / 8, threads = (len8 + 31) / 32 * 32;
    auto go = [&](auto gain) {
      launch_pdl(
          ctx, rms_norm_bf16x8_kernel<std::remove_cv_t<std::remove_pointer_t<decltype(gain)>>>,
          dim3(unsigned(rows)), dim3(threads), 0, static_cast<uint4*>(y.p),
          static_cast<const uint4*>(x.p), gain, len8, eps, offset, static_cast<const uint4*>(zp));
    };
    if (w.dtype == kF32)
      go(static_cast<const float*>(w.p));
    else
      go(static_cast<const __nv_bfloat16*>(w.p));
  } else if (len <= 512) {
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
