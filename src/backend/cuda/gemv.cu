// Decode matrix products (n ≤ 8 activation rows, bf16 weights and activations): bound by
// reading the weights, so every byte of each matrix is read exactly once per step, through
// 16-byte non-caching loads with many in flight.
//
// One launch serves several matrices that share the input (q, k and v; or gate and up with the
// GLU applied before the store), so a layer's attention inputs cost one launch and its MLP
// input one launch, and small matrices ride in the same wave as big ones.
//
// Work split: a block of 8 warps owns 8/W output rows; W warps share a row, each taking a
// contiguous 1/W of its columns, and their partial sums meet in shared memory. W (1, 2, 4 or 8)
// is chosen so that the launch has enough warps to keep every SM streaming: a 1024-row matrix
// on 132 SMs would otherwise give each SM only 8 warps.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = 8;
// 16-byte loads per lane in flight (per matrix), and the warps per SM the row split aims for:
// 4 loads with 64 warps beat 8 loads with 32 on the H200 (8B and 0.6B decode, PERFORMANCE.md).
// HEARTH_GEMV_TUNE="U_plain,U_glu,warps_per_sm" overrides them for measurements (read once).
struct Tune {
  int unroll_plain = 4, unroll_glu = 4, warps_per_sm = 64;  // best on the H200 (PERFORMANCE.md)
};
const Tune& tune() {
  static const Tune t = [] {
    Tune t;
    if (const char* e = std::getenv("HEARTH_GEMV_TUNE"))
      std::sscanf(e, "%d,%d,%d", &t.unroll_plain, &t.unroll_glu, &t.warps_per_sm);
    return t;
  }();
  return t;
}

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

__device__ __forceinline__ float dot8(const uint4& a, const uint4& b) {
  const __nv_bfloat162* pa = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* pb = reinterpret_cast<const __nv_bfloat162*>(&b);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 fa = __bfloat1622float2(pa[j]), fb = __bfloat1622float2(pb[j]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

__device__ __forceinline__ float act_f(int act, float x) {
  if (act == int(Activation::Silu)) return silu_f(x);
  if (act == int(Activation::GeluTanh)) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
  return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

struct Seg {
  const uint4* w;   // [rows, in8]
  const uint4* w2;  // GLU: the up matrix, same shape
  void* y;          // [n, rows]
  const void* bias;
  const void* bias2;
  int64_t rows;
  int64_t first_block;
  int32_t ydt, bdt, bdt2, pad;
};

struct Args {
  Seg seg[kGemvMaxSegs];
  int32_t n_seg;
  int32_t split;  // W: warps per row
  int32_t act;
  int32_t pad;
  const uint4* x;  // [n, in8]
  int64_t in8;
};

template <int N, bool GLU, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const Args a, int64_t n_groups) {
  __shared__ float part[kWarps][GLU ? 2 * N : N];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = kWarps / a.split;
  const int slot = warp / a.split, piece = warp % a.split;
  // This warp's column range [c_lo, c_hi) of a row, in 16-byte units.
  const int64_t len = (a.in8 + a.split - 1) / a.split;
  const int64_t c_lo = piece * len, c_hi = min(a.in8, c_lo + len);
  pdl_trigger();
  bool waited = false;
  // Persistent blocks: as many as fit on the GPU at once, each walking groups of rows, so no
  // partial last wave leaves SMs idle (a 6144-row matrix is 1.45 waves of one-shot blocks).
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    int s = 0;
#pragma unroll
    for (int i = 1; i < kGemvMaxSegs; ++i)
      if (i < a.n_seg && group >= a.seg[i].first_block) s = i;
    const Seg& g = a.seg[s];
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
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32;
        wv[u] = c < c_hi ? ld_stream(wr + c) : make_uint4(0, 0, 0, 0);
        if constexpr (GLU) uv[u] = c < c_hi ? ld_stream(ur + c) : make_uint4(0, 0, 0, 0);
      }
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
            const uint4 xv = a.x[r * a.in8 + c];
            acc[r] += dot8(wv[u], xv);
            if constexpr (GLU) acc2[r] += dot8(uv[u], xv);
          }
        }
      }
    }
    if (!waited) {  // every thread waits before any write
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
      if constexpr (GLU) {
        const float b2 = g.bias2 ? ld(g.bias2, g.bdt2, row) : 0.0f;
#pragma unroll
        for (int r = 0; r < N; ++r)
          st(g.y, g.ydt, r * g.rows + row, act_f(a.act, acc[r] + b) * (acc2[r] + b2));
      } else {
#pragma unroll
        for (int r = 0; r < N; ++r) st(g.y, g.ydt, r * g.rows + row, acc[r] + b);
      }
    }
  }
  if (!waited) pdl_wait();
}

// Blocks of each kernel variant that fit on one SM at once, [GLU][unroll 4/8][N - 1]; filled
// by gemv_init() outside any graph capture.
int g_blocks_per_sm[2][2][8];

template <int N, bool GLU, int U>
void query_occupancy() {
  int b = 0;
  HEARTH_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, gemv_kernel<N, GLU, U>, kWarps * 32, 0));
  g_blocks_per_sm[GLU][U == 8][N - 1] = std::max(b, 1);
}

template <int N>
void query_all() {
  query_occupancy<N, false, 4>();
  query_occupancy<N, false, 8>();
  query_occupancy<N, true, 4>();
  query_occupancy<N, true, 8>();
}

template <bool GLU>
void launch(Ctx& ctx, Args& a, int64_t n, int64_t total_rows) {
  // Warps per row: enough warps in flight to cover the memory latency on every SM (about
  // 32 per SM), while each lane still gets at least a few 16-byte loads.
  const int64_t target = int64_t(ctx.sm_count) * tune().warps_per_sm;
  int split = 1;
  while (split < kWarps && total_rows * split < target && a.in8 / (split * 2) >= 32 * 2) split *= 2;
  a.split = split;
  const int rows_per_block = kWarps / split;
  int64_t blocks = 0;
  for (int i = 0; i < a.n_seg; ++i) {
    a.seg[i].first_block = blocks;
    blocks += (a.seg[i].rows + rows_per_block - 1) / rows_per_block;
  }
  const int unroll = GLU ? tune().unroll_glu : tune().unroll_plain;
  auto go = [&](auto kernel) {
    const int64_t resident =
        int64_t(ctx.sm_count) * g_blocks_per_sm[GLU][unroll == 8][std::clamp<int64_t>(n, 1, 8) - 1];
    const unsigned grid = unsigned(std::min(blocks, resident));
    launch_pdl(ctx, kernel, dim3(grid), dim3(kWarps * 32), 0, a, blocks);
  };
  auto by_unroll = [&](auto n_rows) {
    constexpr int N = decltype(n_rows)::value;
    if (unroll == 4)
      go(gemv_kernel<N, GLU, 4>);
    else
      go(gemv_kernel<N, GLU, 8>);
  };
  switch (n) {
    case 1:
      by_unroll(std::integral_constant<int, 1>());
      break;
    case 2:
      by_unroll(std::integral_constant<int, 2>());
      break;
    case 3:
      by_unroll(std::integral_constant<int, 3>());
      break;
    case 4:
      by_unroll(std::integral_constant<int, 4>());
      break;
    case 5:
      by_unroll(std::integral_constant<int, 5>());
      break;
    case 6:
      by_unroll(std::integral_constant<int, 6>());
      break;
    case 7:
      by_unroll(std::integral_constant<int, 7>());
      break;
    case 8:
      by_unroll(std::integral_constant<int, 8>());
      break;
    default:
      cuda_fail("gemv", "more than 8 activation rows", __FILE__, __LINE__);
  }
  HEARTH_CUDA_LAUNCHED();
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

void gemv_init() {
  query_all<1>();
  query_all<2>();
  query_all<3>();
  query_all<4>();
  query_all<5>();
  query_all<6>();
  query_all<7>();
  query_all<8>();
}

bool gemv_fits(const Ten& x, const Ten& w) {
  return x.rows() <= 8 && x.dtype == kBF16 && w.dtype == kBF16 && w.ndim == 2 &&
         x.cols() == w.d[1] && x.cols() % 8 == 0 && aligned16(x.p) && aligned16(w.p);
}

void gemv_many(Ctx& ctx, const Ten& x, const GemvJobs& jobs) {
  Args a{};
  a.x = static_cast<const uint4*>(x.p);
  a.in8 = x.cols() / 8;
  a.n_seg = jobs.n;
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

void gemv_glu(Ctx& ctx, const Ten& y, const Ten& x, const Ten& gate, const Ten& gate_bias,
              const Ten& up, const Ten& up_bias, int32_t act) {
  Args a{};
  a.x = static_cast<const uint4*>(x.p);
  a.in8 = x.cols() / 8;
  a.n_seg = 1;
  a.act = act;
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
