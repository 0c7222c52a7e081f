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
//
// Five other designs were built, run on the H200 and removed as slower than this one (bulk
// copies, tensor cores, a cp.async ring, an even split of row pieces, f32 input / no preload):
// docs/design-notes.md, "Decode GEMV designs measured and removed".
#include <algorithm>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

namespace {

// Blocks of this many warps; the input norm stages at most kMaxNormBytes (n rows × in × 2) of
// normalised input in shared memory.
constexpr int kWarps = 8;
constexpr size_t kMaxNormBytes = 96 * 1024;
// 16-byte loads per lane in flight per matrix, and the warps per SM the row split aims for:
// 4 loads beat 8 on the H200, and with the input norm and residual folded in, a split aiming at
// 48 warps per SM beat 32, 64, 96 and 128 on the 8B (211.6 t/s against 206.4 at 64) and matched
// 64 on the 0.6B and the 9B (design-notes.md, "Measured and rejected").
constexpr int kUnroll = 4;
constexpr int kWarpsPerSm = 48;

struct Seg {
  const uint4* w;   // [rows, in8]
  const uint4* w2;  // GLU: the up matrix, same shape
  void* y;          // [n, rows]; unused when resid is set
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
  const uint4* x;  // [n, in8]
  int64_t in8;
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

// xs[r][i] = bf16(x[r][i] * inv_rms(x[r]) * (w[i] + offset)) for the block's N rows; the same
// arithmetic as rms_norm (norm.cu), so the product sees the values the norm would have stored.
template <int N>
__device__ void normalise_input(const Args& a, uint4* xs) {
  const float len = float(a.in8 * 8);
  for (int r = 0; r < N; ++r) {
    const uint4* xr = a.x + r * a.in8;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < a.in8; i += blockDim.x) ss = add_squares_bf16x8(xr[i], ss);
    const float inv = rsqrtf(block_sum(ss) / len + a.norm_eps);
    for (int64_t i = threadIdx.x; i < a.in8; i += blockDim.x)
      xs[r * a.in8 + i] = scale_bf16x8(xr[i], inv, a.norm_w, a.norm_wdt, i * 8, a.norm_offset);
  }
}

template <int N, bool GLU, bool NORM>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const Args a, int64_t n_groups) {
  extern __shared__ uint4 xs[];  // NORM: the normalised input [N][in8]
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
  // normalised row is in shared memory; requesting them only into L2 was slower: 8B tg128
  // 210.2 against 217.7 t/s).
  uint4 pre_w[kUnroll], pre_u[GLU ? kUnroll : 1];
  bool preloaded = false;
  if constexpr (NORM) {
    const Seg& g = a.seg[seg_of(a, blockIdx.x)];
    const int64_t row = (blockIdx.x - g.first_block) * rows_per_block + slot;
    if (row < g.rows) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c_lo + lane + u * 32;
        pre_w[u] = c < c_hi ? ld_stream(g.w + row * a.in8 + c) : make_uint4(0, 0, 0, 0);
        if constexpr (GLU)
          pre_u[u] = c < c_hi ? ld_stream(g.w2 + row * a.in8 + c) : make_uint4(0, 0, 0, 0);
      }
      preloaded = true;
    }
    pdl_wait();
    waited = true;
    normalise_input<N>(a, xs);
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
        if (preloaded) {
          wv[u] = pre_w[u];
          if constexpr (GLU) uv[u] = pre_u[u];
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
            const uint4 xv = NORM ? xs[r * a.in8 + c] : a.x[r * a.in8 + c];
            acc[r] += dot8(wv[u], xv);
            if constexpr (GLU) acc2[r] += dot8(uv[u], xv);
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
    if (live && lane == 0 && piece == 0) {
      const float b = g.bias ? ld(g.bias, g.bdt, row) : 0.0f;
      if constexpr (GLU) {
        const float b2 = g.bias2 ? ld(g.bias2, g.bdt2, row) : 0.0f;
#pragma unroll
        for (int r = 0; r < N; ++r)
          st(g.y, g.ydt, r * g.rows + row, activation_f(a.act, acc[r] + b) * (acc2[r] + b2));
      } else if (g.resid) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
          const int64_t i = r * g.rows + row;
          st(g.resid, g.rdt, i, ld(g.resid, g.rdt, i) + rounded(g.ydt, acc[r] + b) * g.rscale);
        }
      } else {
#pragma unroll
        for (int r = 0; r < N; ++r) st(g.y, g.ydt, r * g.rows + row, acc[r] + b);
      }
    }
  }
  if (!waited) pdl_wait();
}

template <int N>
void allow_norm_smem() {
  for (const void* k : {reinterpret_cast<const void*>(gemv_kernel<N, false, true>),
                        reinterpret_cast<const void*>(gemv_kernel<N, true, true>)})
    HEARTH_CUDA_CHECK(
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxNormBytes)));
}

template <bool GLU>
void launch(Ctx& ctx, Args& a, int64_t n, int64_t total_rows) {
  a.split = gemv_split(ctx, total_rows, a.in8);
  const int rows_per_block = kWarps / a.split;
  int64_t blocks = 0;
  for (int i = 0; i < a.n_seg; ++i) {
    a.seg[i].first_block = blocks;
    blocks += (a.seg[i].rows + rows_per_block - 1) / rows_per_block;
  }
  const bool norm = a.norm_w != nullptr;
  const size_t smem = norm ? size_t(n) * size_t(a.in8) * 16 : 0;
  auto go = [&](auto kernel) {
    const int64_t resident =
        int64_t(ctx.sm_count) * gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
    const unsigned grid = unsigned(std::min(blocks, resident));
    launch_pdl(ctx, kernel, dim3(grid), dim3(kWarps * 32), smem, a, blocks);
  };
  auto by_norm = [&](auto n_rows) {
    constexpr int N = decltype(n_rows)::value;
    if (norm)
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

// Warps per row: enough warps in flight to cover the memory latency on every SM (the
// kWarpsPerSm target), while each lane still gets at least two 16-byte loads.
int gemv_split(const Ctx& ctx, int64_t rows, int64_t words) {
  const int64_t target = int64_t(ctx.sm_count) * kWarpsPerSm;
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

void gemv_init() {
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
  return norm_w.numel() == x.cols() && size_t(x.numel()) * 2 <= kMaxNormBytes;
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
