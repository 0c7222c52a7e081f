// Decode matrix products (n ≤ 8 activation rows, bf16 weights and activations): bound by
// reading the weights, so every byte of each matrix is read exactly once per step, through
// 16-byte non-caching loads with many in flight.
//
// One launch serves several matrices that share the input (q, k and v; or gate and up with the
// GLU applied before the store), so a layer's attention inputs cost one launch and its MLP
// input one launch, and small matrices ride in the same wave as big ones. The launches that
// begin and end a residual block absorb the work around them, so a decode layer has no
// separate norm or add pass:
// - input norm: x arrives un-normalised; every block computes rms_norm(x) * gain itself into
//   shared memory (x is a few KB, read from L2) while its first weights are already in flight;
// - residual: instead of storing y, the owner of an output row adds it into the residual
//   stream (x += rounded(y) * scale), exactly what the separate add would have computed.
//
// Work split: a block of 8 warps owns 8/W output rows; W warps share a row, each taking a
// contiguous 1/W of its columns, and their partial sums meet in shared memory. W (1, 2, 4 or 8)
// is chosen so that the launch has enough warps to keep every SM streaming: a 1024-row matrix
// on 132 SMs would otherwise give each SM only 8 warps.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "backend/cuda/gemv_args.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = kGemvWarps;
// 16-byte loads per lane in flight per matrix, and the warps per SM the row split aims for:
// 4 loads beat 8 on the H200 (session 2), and with the input norm and residual folded in, a
// split aiming at 48 warps per SM beat 32, 64, 96 and 128 on the 8B (211.6 t/s against
// 206.4 at 64) and matched 64 on the 0.6B and the 9B (PERFORMANCE.md, session 3).
// HEARTH_GEMV_WARPS_PER_SM overrides it for measurements (read once; gemv_warps_per_sm).
constexpr int kUnroll = 4;
// HEARTH_GEMV_NORM_PRELOAD=0: NORM kernels only prefetch their first weights into L2 before
// the wait (the session-4 behaviour), for measurements.
bool norm_preload() {
  static const bool on = [] {
    const char* e = std::getenv("HEARTH_GEMV_NORM_PRELOAD");
    return !(e && std::string(e) == "0");
  }();
  return on;
}
std::atomic<int> g_pinned{int(GemvKernel::Auto)};

using Seg = GemvSeg;
using Args = GemvArgs;

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// dot8 with the second word already in f32 (x0: elements 0-3, x1: 4-7): the same terms, summed
// in the same order, so the same result.
__device__ __forceinline__ float dot8_f32(const uint4& a, const float4& x0, const float4& x1) {
  const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
  const float2 xb[4] = {{x0.x, x0.y}, {x0.z, x0.w}, {x1.x, x1.y}, {x1.z, x1.w}};
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 fa = __bfloat1622float2(pa[j]);
    s = fmaf(fa.x, xb[j].x, s);
    s = fmaf(fa.y, xb[j].y, s);
  }
  return s;
}

// kMode (NORM kernels, measurements; HEARTH_GEMV_MODE for one activation row): bit 0 keeps the
// normalised input in shared memory as f32 (no conversion in the inner loop, twice the shared
// reads), bit 1 drops the register preload (first weights only requested into L2) so the
// kernel needs fewer registers and more blocks fit on an SM.
template <int N, bool GLU, bool NORM, int kMode = 0>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const Args a, int64_t n_groups) {
  constexpr bool kXf32 = NORM && (kMode & 1), kLean = NORM && (kMode & 2);
  extern __shared__ uint4 xs[];  // NORM: the normalised input [N][in8] (kXf32: f32, [N][in8][2])
  float4* xsf = reinterpret_cast<float4*>(xs);
  __shared__ float part[kWarps][GLU ? 2 * N : N];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = kWarps / a.split;
  const int slot = warp / a.split, piece = warp % a.split;
  // This warp's column range [c_lo, c_hi) of a row, in 16-byte units.
  const int64_t len = (a.in8 + a.split - 1) / a.split;
  const int64_t c_lo = piece * len, c_hi = min(a.in8, c_lo + len);
  pdl_trigger();
  bool waited = false;
  // NORM: the block's first batch of weights, loaded into registers before the wait (the
  // whole block normalises x after it, so without them no weight would be in flight until the
  // normalised row is in shared memory). a.preload = 0 only requests them into L2.
  uint4 pre_w[kLean ? 1 : kUnroll], pre_u[GLU && !kLean ? kUnroll : 1];
  bool preloaded = false;
  if constexpr (NORM) {
    const Seg& g = a.seg[seg_of(a, blockIdx.x)];
    const int64_t row = (blockIdx.x - g.first_block) * rows_per_block + slot;
    if constexpr (kLean) {
    } else if (row < g.rows && a.preload) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c_lo + lane + u * 32;
        pre_w[u] = c < c_hi ? ld_stream(g.w + row * a.in8 + c) : make_uint4(0, 0, 0, 0);
        if constexpr (GLU)
          pre_u[u] = c < c_hi ? ld_stream(g.w2 + row * a.in8 + c) : make_uint4(0, 0, 0, 0);
      }
      preloaded = true;
    } else if (row < g.rows) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c_lo + lane + u * 32;
        if (c < c_hi) {
          prefetch_l2(g.w + row * a.in8 + c);
          if constexpr (GLU) prefetch_l2(g.w2 + row * a.in8 + c);
        }
      }
    }
    pdl_wait();
    waited = true;
    if constexpr (kXf32)
      normalise_input(a, N, [&](int r, int64_t i, const uint4& v) {
        float f[8];
        bf16x8_to_f32(v, f);
        xsf[(r * a.in8 + i) * 2] = make_float4(f[0], f[1], f[2], f[3]);
        xsf[(r * a.in8 + i) * 2 + 1] = make_float4(f[4], f[5], f[6], f[7]);
      });
    else
      normalise_input(a, N, xs);
    __syncthreads();
  }
  // Persistent blocks: as many as fit on the GPU at once, each walking groups of rows, so no
  // partial last wave leaves SMs idle (a 6144-row matrix is 1.45 waves of one-shot blocks).
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    const Seg& g = a.seg[seg_of(a, group)];
    const int64_t row = (group - g.first_block) * rows_per_block + slot;
    const bool live = row < g.rows;
    float acc[N], acc2[N];
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] = acc2[r] = 0.0f;
    const uint4* wr = g.w + row * a.in8;
    const uint4* ur = GLU ? g.w2 + row * a.in8 : nullptr;
    // The first batch of weight loads is issued before pdl_wait(): weights are never written,
    // so they stream in while the previous kernel (the norm producing x) finishes.
    for (int64_t c0 = c_lo + lane; live && c0 < c_hi; c0 += 32 * kUnroll) {
      uint4 wv[kUnroll], uv[GLU ? kUnroll : 1];
      // The first batch of the first group (row blockIdx.x's, columns from c_lo + lane) is
      // the one preloaded above.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        if (!kLean && preloaded) {
          wv[u] = pre_w[kLean ? 0 : u];
          if constexpr (GLU && !kLean) uv[u] = pre_u[u];
        } else {
          wv[u] = c < c_hi ? ld_stream(wr + c) : make_uint4(0, 0, 0, 0);
          if constexpr (GLU) uv[u] = c < c_hi ? ld_stream(ur + c) : make_uint4(0, 0, 0, 0);
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
        if (c < c_hi) {
#pragma unroll
          for (int r = 0; r < N; ++r) {
            if constexpr (kXf32) {
              const float4 x0 = xsf[(r * a.in8 + c) * 2], x1 = xsf[(r * a.in8 + c) * 2 + 1];
              acc[r] += dot8_f32(wv[u], x0, x1);
              if constexpr (GLU) acc2[r] += dot8_f32(uv[u], x0, x1);
            } else {
              const uint4 xv = NORM ? xs[r * a.in8 + c] : a.x[r * a.in8 + c];
              acc[r] += dot8(wv[u], xv);
              if constexpr (GLU) acc2[r] += dot8(uv[u], xv);
            }
          }
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
    if (live && lane == 0 && piece == 0)
#pragma unroll
      for (int r = 0; r < N; ++r) store_row<GLU>(g, a.act, r, row, acc[r], acc2[r]);
  }
  if (!waited) pdl_wait();
}

template <int N>
void allow_norm_smem() {
  for (const void* k : {reinterpret_cast<const void*>(gemv_kernel<N, false, true>),
                        reinterpret_cast<const void*>(gemv_kernel<N, true, true>)})
    allow_dynamic_smem(k, kGemvMaxNormBytes);  // (its static arrays leave the 96 KB on sm_80+)
  if constexpr (N == 1) {
    for (const void* k : {reinterpret_cast<const void*>(gemv_kernel<1, false, true, 1>),
                          reinterpret_cast<const void*>(gemv_kernel<1, true, true, 1>),
                          reinterpret_cast<const void*>(gemv_kernel<1, false, true, 2>),
                          reinterpret_cast<const void*>(gemv_kernel<1, true, true, 2>),
                          reinterpret_cast<const void*>(gemv_kernel<1, false, true, 3>),
                          reinterpret_cast<const void*>(gemv_kernel<1, true, true, 3>)})
      allow_dynamic_smem(k, kGemvMaxNormBytes);
  }
}

// HEARTH_GEMV_MODE=0..3: gemv_kernel's kMode for one-row NORM launches (read once).
int norm_mode() {
  static const int m = [] {
    const char* e = std::getenv("HEARTH_GEMV_MODE");
    const int v = e ? std::atoi(e) : 0;
    return v >= 0 && v <= 3 ? v : 0;
  }();
  return m;
}

template <bool GLU>
void launch(Ctx& ctx, Args& a, int64_t n, int64_t total_rows) {
  if (gemv_even(ctx, a, n, GLU, total_rows) || gemv_mma(ctx, a, n, GLU) ||
      (n == 1 && gemv_bulk(ctx, a, total_rows, GLU))) {
    HEARTH_CUDA_LAUNCHED();
    return;
  }
  a.split = gemv_split(ctx, total_rows, a.in8);
  const int rows_per_block = kWarps / a.split;
  int64_t blocks = 0;
  for (int i = 0; i < a.n_seg; ++i) {
    a.seg[i].first_block = blocks;
    blocks += (a.seg[i].rows + rows_per_block - 1) / rows_per_block;
  }
  if (gemv_ring(ctx, a, n, GLU, blocks)) {
    HEARTH_CUDA_LAUNCHED();
    return;
  }
  const bool norm = a.norm_w != nullptr;
  a.preload = norm_preload() ? 1 : 0;
  const int mode = norm && n == 1 && size_t(a.in8) * 32 <= kGemvMaxNormBytes ? norm_mode() : 0;
  const size_t smem = norm ? size_t(n) * size_t(a.in8) * ((mode & 1) ? 32 : 16) : 0;
  auto go = [&](auto kernel) {
    const int64_t resident =
        int64_t(ctx.sm_count) * gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
    const unsigned grid = unsigned(std::min(blocks, resident));
    launch_pdl(ctx, kernel, dim3(grid), dim3(kWarps * 32), smem, a, blocks);
  };
  auto by_norm = [&](auto n_rows) {
    constexpr int N = decltype(n_rows)::value;
    if (norm && N == 1 && mode != 0)
      mode == 1   ? go(gemv_kernel<1, GLU, true, 1>)
      : mode == 2 ? go(gemv_kernel<1, GLU, true, 2>)
                  : go(gemv_kernel<1, GLU, true, 3>);
    else if (norm)
      go(gemv_kernel<N, GLU, true>);
    else
      go(gemv_kernel<N, GLU, false>);
  };
  switch (n) {
    case 1:
      by_norm(std::integral_constant<int, 1>());
      break;
    case 2:
      by_norm(std::integral_constant<int, 2>());
      break;
    case 3:
      by_norm(std::integral_constant<int, 3>());
      break;
    case 4:
      by_norm(std::integral_constant<int, 4>());
      break;
    case 5:
      by_norm(std::integral_constant<int, 5>());
      break;
    case 6:
      by_norm(std::integral_constant<int, 6>());
      break;
    case 7:
      by_norm(std::integral_constant<int, 7>());
      break;
    case 8:
      by_norm(std::integral_constant<int, 8>());
      break;
    default:
      cuda_fail("gemv", "more than 8 activation rows", __FILE__, __LINE__);
  }
  HEARTH_CUDA_LAUNCHED();
}

void set_norm(Args& a, const GemvNorm& norm) {
  if (norm.w.empty()) return;
  a.norm_w = norm.w.p;
  a.norm_wdt = norm.w.dtype;
  a.norm_eps = norm.eps;
  a.norm_offset = norm.offset;
}

}  // namespace

int gemv_warps_per_sm() {
  static const int w = [] {
    const char* e = std::getenv("HEARTH_GEMV_WARPS_PER_SM");
    const int v = e ? std::atoi(e) : 0;
    return v > 0 ? v : 48;
  }();
  return w;
}

// Warps per row: enough warps in flight to cover the memory latency on every SM (the
// warps_per_sm target), while each lane still gets at least two 16-byte loads.
int gemv_split(const Ctx& ctx, int64_t rows, int64_t words) {
  const int64_t target = int64_t(ctx.sm_count) * gemv_warps_per_sm();
  int split = 1;
  while (split < kWarps && rows * split < target && words / (split * 2) >= 32 * 2) split *= 2;
  return split;
}

// Blocks of one kernel variant that fit on an SM with `smem` bytes of dynamic shared memory,
// measured once per (kernel, smem) — outside the hot path, and allowed during graph capture.
int gemv_resident_blocks(const void* kernel, size_t smem) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, size_t>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto [it, fresh] = known.try_emplace({kernel, smem}, 1);
  if (fresh) {
    int b = 0;
    HEARTH_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kWarps * 32, smem));
    it->second = std::max(b, 1);
  }
  return it->second;
}

size_t allow_dynamic_smem(const void* kernel, size_t wanted) {
  int device = 0, optin = 0;
  HEARTH_CUDA_CHECK(cudaGetDevice(&device));
  HEARTH_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes fa{};
  HEARTH_CUDA_CHECK(cudaFuncGetAttributes(&fa, kernel));
  const size_t room = size_t(optin) > fa.sharedSizeBytes ? size_t(optin) - fa.sharedSizeBytes : 0;
  const size_t allowed = std::min(wanted, room);
  HEARTH_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(allowed)));
  return allowed;
}

void gemv_set_kernel(GemvKernel k) { g_pinned.store(int(k), std::memory_order_relaxed); }

bool gemv_takes(GemvKernel k) {
  static const bool bulk_env = [] {
    const char* e = std::getenv("HEARTH_GEMV_BULK");
    return e && std::string(e) == "1";
  }();
  static const bool mma_env = [] {
    const char* e = std::getenv("HEARTH_GEMV_MMA");
    return e && std::string(e) == "1";
  }();
  static const bool ring_env = [] {
    const char* e = std::getenv("HEARTH_GEMV_RING");
    return e && std::string(e) == "1";
  }();
  static const bool even_env = [] {
    const char* e = std::getenv("HEARTH_GEMV_EVEN");
    return e && std::string(e) == "1";
  }();
  const auto pinned = GemvKernel(g_pinned.load(std::memory_order_relaxed));
  if (pinned != GemvKernel::Auto) return pinned == k;
  return (k == GemvKernel::Bulk && bulk_env) || (k == GemvKernel::Mma && mma_env) ||
         (k == GemvKernel::Ring && ring_env) || (k == GemvKernel::Even && even_env);
}

void gemv_init() {
  gemv_bulk_init();
  gemv_mma_init();
  gemv_ring_init();
  gemv_even_init();
  allow_norm_smem<1>();
  allow_norm_smem<2>();
  allow_norm_smem<3>();
  allow_norm_smem<4>();
  allow_norm_smem<5>();
  allow_norm_smem<6>();
  allow_norm_smem<7>();
  allow_norm_smem<8>();
}

bool gemv_fits(const Ten& x, const Ten& w) {
  return x.rows() <= 8 && x.dtype == kBF16 && w.dtype == kBF16 && w.ndim == 2 &&
         x.cols() == w.d[1] && x.cols() % 8 == 0 && aligned16(x.p) && aligned16(w.p);
}

bool gemv_norm_fits(const Ten& x, const Ten& norm_w) {
  return norm_w.numel() == x.cols() && size_t(x.numel()) * 2 <= kGemvMaxNormBytes;
}

void gemv_many(Ctx& ctx, const Ten& x, const GemvJobs& jobs, const GemvNorm& norm) {
  Args a{};
  a.x = static_cast<const uint4*>(x.p);
  a.in8 = x.cols() / 8;
  a.n_seg = jobs.n;
  set_norm(a, norm);
  int64_t total = 0;
  for (int i = 0; i < jobs.n; ++i) {
    Seg& s = a.seg[i];
    s.w = static_cast<const uint4*>(jobs.w[i].p);
    s.y = jobs.y[i].p;
    s.ydt = jobs.y[i].dtype;
    s.bias = jobs.bias[i].p;
    s.bdt = jobs.bias[i].dtype;
    s.rows = jobs.w[i].d[0];
    total += s.rows;
  }
  launch<false>(ctx, a, x.rows(), total);
}

void gemv_residual(Ctx& ctx, const Ten& resid, float scale, const Ten& x, const Ten& w,
                   const Ten& bias, int32_t product_dtype) {
  Args a{};
  a.x = static_cast<const uint4*>(x.p);
  a.in8 = x.cols() / 8;
  a.n_seg = 1;
  Seg& s = a.seg[0];
  s.w = static_cast<const uint4*>(w.p);
  s.ydt = product_dtype;
  s.bias = bias.p;
  s.bdt = bias.dtype;
  s.resid = resid.p;
  s.rdt = resid.dtype;
  s.rscale = scale;
  s.rows = w.d[0];
  launch<false>(ctx, a, x.rows(), s.rows);
}

void gemv_glu(Ctx& ctx, const Ten& y, const Ten& x, const Ten& gate, const Ten& gate_bias,
              const Ten& up, const Ten& up_bias, int32_t act, const GemvNorm& norm) {
  Args a{};
  a.x = static_cast<const uint4*>(x.p);
  a.in8 = x.cols() / 8;
  a.n_seg = 1;
  a.act = act;
  set_norm(a, norm);
  Seg& s = a.seg[0];
  s.w = static_cast<const uint4*>(gate.p);
  s.w2 = static_cast<const uint4*>(up.p);
  s.y = y.p;
  s.ydt = y.dtype;
  s.bias = gate_bias.p;
  s.bdt = gate_bias.dtype;
  s.bias2 = up_bias.p;
  s.bdt2 = up_bias.dtype;
  s.rows = gate.d[0];
  launch<true>(ctx, a, x.rows(), s.rows);
}

}  // namespace hearth::cuda
