// Decode products (n ≤ 8 activation rows) on the tensor cores: the same products as gemv_kernel
// (gemv.cu; plain, GLU, input norm, residual add, several matrices per launch) with the dot
// products done by mma.sync instead of ~30 scalar instructions per 16-byte weight word.
//
// Why (PERFORMANCE.md, session 8): a chain of plain streaming kernels of the 8B's matrices runs
// at 4.33 TB/s, the register GEMVs at ~3.4 TB/s over a decode step (the 2 GB head 4.1). An ncu
// look at a shared-memory variant showed its warps issue-bound on the scalar dot products; the
// register kernel does the same arithmetic, so it needs many warps to keep enough loads in
// flight. Here one 16-byte load of weights feeds two mma instructions.
//
// Fragments (mma.m16n8k16, bf16 in, f32 accumulate). The weights are the B operand (k × n: 16
// columns of x times 8 output rows), x the A operand (m × k: the activation rows, m ≥ n zero).
// Lane (g = lane / 4, t = lane % 4) loads 16 bytes of output row g of its 8-row tile and the same
// 16 bytes of columns of activation row g: columns k0 + 8t … k0 + 8t + 7 of a 32-column chunk.
// A dot product does not care in which order its terms are summed, so the chunk's columns are
// given to the mma's k slots in the order that makes these loads the fragments: for the first
// mma, lane t's slots {2t, 2t+1} are columns 8t + {0, 1} and slots {2t+8, 2t+9} are 8t + {2, 3};
// for the second, 8t + {4, 5} and 8t + {6, 7}. The mapping depends on t alone, so A and B agree
// on it whichever lane holds them. The accumulator gives lane (g, t) activation row g's sums for
// output rows 2t and 2t + 1 of the tile.
//
// Work split: the unit is a tile of 8 output rows of one matrix; a block of 8 warps owns 8/W
// tiles with W warps per tile, each a contiguous 1/W of the columns, their sums meeting in
// shared memory; blocks are persistent over groups of tiles, as in gemv_kernel.
#include <cstdlib>
#include <string>

#include "backend/cuda/gemv_args.cuh"

namespace hearth::cuda {

namespace {

constexpr int kWarps = kGemvWarps;
constexpr int kThreads = kWarps * 32;

// d += a · b for one m16n8k16 tile; a: x's fragment (rows g+8 zero), b: the weights'.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a2, uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(0u), "r"(a2), "r"(0u), "r"(b0), "r"(b1));
#endif
}

// The two mmas one 16-byte word of weights and the matching word of x feed.
__device__ __forceinline__ void mma_word(float (&d)[4], const uint4& x, const uint4& w) {
  mma_bf16(d, x.x, x.y, w.x, w.y);
  mma_bf16(d, x.z, x.w, w.z, w.w);
}

// kUnroll: 16-byte weight loads per lane in flight; kMinBlocks: blocks per SM the registers
// must allow (1: as many as the code takes). Both chosen per launch (HEARTH_GEMV_MMA_UNROLL,
// HEARTH_GEMV_MMA_MINB) until measured.
template <bool GLU, bool NORM, int kUnroll, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    gemv_mma_kernel(const GemvArgs a, int n, int64_t n_groups) {
  extern __shared__ uint4 xs[];                      // NORM: the normalised input [n][in8]
  __shared__ float part[kWarps][GLU ? 2 : 1][8][8];  // [warp][gate/up][activation row][tile row]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int W = a.split, tiles_per_block = kWarps / W;
  const int slot = warp / W, piece = warp % W;
  const int in8 = int(a.in8);  // < 2^31 words (gemv_mma checks)
  const int len = (in8 + W - 1) / W;
  const int c_lo = piece * len, c_hi = min(in8, c_lo + len);
  const bool x_row = g < n;  // this lane's activation row exists
  pdl_trigger();

  // The first group's first weights, before the wait (weights are never written); the first
  // pass of the loop below uses them.
  uint4 wv[kUnroll], uv[GLU ? kUnroll : 1];
  {
    const int64_t tile = int64_t(blockIdx.x) * tiles_per_block + slot;
    const GemvSeg& s = a.seg[seg_of(a, tile)];
    const int64_t row = (tile - s.first_block) * 8 + g;
    const bool live = row < s.rows;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c_lo + t + 4 * u;
      const bool ok = live && c < c_hi;
      wv[u] = ok ? ld_stream(s.w + row * in8 + c) : make_uint4(0, 0, 0, 0);
      if constexpr (GLU) uv[u] = ok ? ld_stream(s.w2 + row * in8 + c) : make_uint4(0, 0, 0, 0);
    }
  }
  pdl_wait();
  const uint4* x = a.x;
  if constexpr (NORM) {
    normalise_input(a, n, xs);
    __syncthreads();
    x = xs;
  }
  const uint4* xg = x + g * in8;  // this lane's activation row (read only when x_row)

  bool preloaded = true;
  for (int64_t group = blockIdx.x; group < n_groups; group += gridDim.x) {
    const int64_t tile = group * tiles_per_block + slot;
    const GemvSeg& s = a.seg[seg_of(a, tile)];
    const int64_t row0 = (tile - s.first_block) * 8;  // the tile's first output row
    const bool live = row0 + g < s.rows;
    const uint4* wr = s.w + (row0 + g) * in8;
    const uint4* ur = GLU ? s.w2 + (row0 + g) * in8 : nullptr;
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // Every lane runs the same iterations (the mma needs the whole warp); missing rows and
    // columns load zeros.
    for (int c0 = c_lo + t; c0 - t < c_hi; c0 += 4 * kUnroll) {
      if (!preloaded)
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int c = c0 + 4 * u;
          const bool ok = live && c < c_hi;
          wv[u] = ok ? ld_stream(wr + c) : make_uint4(0, 0, 0, 0);
          if constexpr (GLU) uv[u] = ok ? ld_stream(ur + c) : make_uint4(0, 0, 0, 0);
        }
      preloaded = false;
      // x is small and cached (L1, or shared memory for NORM): read as the mmas need it.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + 4 * u;
        const uint4 xv = x_row && c < c_hi ? xg[c] : make_uint4(0, 0, 0, 0);
        mma_word(d, xv, wv[u]);
        if constexpr (GLU) mma_word(e, xv, uv[u]);
      }
    }
    preloaded = false;  // (also when the first group had no columns for this warp)
    // d[0], d[1]: activation row g, tile rows 2t and 2t + 1 (d[2], d[3] are the zero rows).
    if (W > 1) {
      if (x_row) {
        part[warp][0][g][2 * t] = d[0];
        part[warp][0][g][2 * t + 1] = d[1];
        if constexpr (GLU) {
          part[warp][GLU ? 1 : 0][g][2 * t] = e[0];
          part[warp][GLU ? 1 : 0][g][2 * t + 1] = e[1];
        }
      }
      __syncthreads();
      if (piece == 0 && x_row)
        for (int p = 1; p < W; ++p) {
          d[0] += part[warp + p][0][g][2 * t];
          d[1] += part[warp + p][0][g][2 * t + 1];
          if constexpr (GLU) {
            e[0] += part[warp + p][GLU ? 1 : 0][g][2 * t];
            e[1] += part[warp + p][GLU ? 1 : 0][g][2 * t + 1];
          }
        }
      __syncthreads();  // part[] is rewritten by the next group
    }
    if (piece == 0 && x_row && row0 < s.rows) {
      if (row0 + 2 * t < s.rows) store_row<GLU>(s, a.act, g, row0 + 2 * t, d[0], e[0]);
      if (row0 + 2 * t + 1 < s.rows) store_row<GLU>(s, a.act, g, row0 + 2 * t + 1, d[1], e[1]);
    }
  }
}

int env_int(const char* name, int fallback) {
  const char* e = std::getenv(name);
  return e ? std::atoi(e) : fallback;
}
// The kernel variant: loads in flight (4 or 8) and the register cap (HEARTH_GEMV_MMA_MINB=1:
// 4 blocks per SM, 3 with the GLU).
bool unroll8() {
  static const bool v = env_int("HEARTH_GEMV_MMA_UNROLL", 4) == 8;
  return v;
}
bool capped() {
  static const bool v = env_int("HEARTH_GEMV_MMA_MINB", 0) == 1;
  return v;
}

template <bool GLU, bool NORM, typename F>
void for_variant(F&& f) {
  constexpr int kCap = GLU ? 3 : 4;
  if (unroll8())
    capped() ? f(gemv_mma_kernel<GLU, NORM, 8, kCap>) : f(gemv_mma_kernel<GLU, NORM, 8, 1>);
  else
    capped() ? f(gemv_mma_kernel<GLU, NORM, 4, kCap>) : f(gemv_mma_kernel<GLU, NORM, 4, 1>);
}

// The normalised input's largest size each NORM kernel (plain, GLU) may take: 96 KB, less where
// the device allows less beside the kernel's static arrays (gemv_mma_init).
size_t g_norm_bytes[2] = {0, 0};

template <bool GLU>
void allow_norm_smem() {
  for_variant<GLU, true>([](auto kernel) {
    g_norm_bytes[GLU] =
        allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kGemvMaxNormBytes);
  });
}

}  // namespace

void gemv_mma_init() {
  allow_norm_smem<false>();
  allow_norm_smem<true>();
}

bool gemv_mma(Ctx& ctx, GemvArgs a, int64_t n, bool glu) {
  if (!gemv_takes(GemvKernel::Mma) || n < 1 || n > 8 || a.in8 >= (int64_t(1) << 31)) return false;
  const bool norm = a.norm_w != nullptr;
  const size_t smem = norm ? size_t(n) * size_t(a.in8) * 16 : 0;
  if (smem > (norm ? g_norm_bytes[glu] : 0)) return false;
  // Tiles of 8 rows per segment, numbered across segments (first_block: a segment's first tile).
  int64_t tiles = 0;
  for (int i = 0; i < a.n_seg; ++i) {
    a.seg[i].first_block = tiles;
    tiles += (a.seg[i].rows + 7) / 8;
  }
  // Warps per tile: enough warps for every SM, while each lane keeps a full batch of loads.
  const int64_t target = int64_t(ctx.sm_count) * gemv_warps_per_sm();
  int W = 1;
  while (W < kWarps && tiles * W < target && a.in8 >= int64_t(16) * (2 * W)) W *= 2;
  a.split = W;
  const int64_t n_groups = (tiles + kWarps / W - 1) / (kWarps / W);
  auto go = [&](auto kernel) {
    const int64_t resident =
        int64_t(ctx.sm_count) * gemv_resident_blocks(reinterpret_cast<const void*>(kernel), smem);
    const unsigned grid = unsigned(std::min(n_groups, resident));
    launch_pdl(ctx, kernel, dim3(grid), dim3(kThreads), smem, a, int(n), n_groups);
  };
  if (glu)
    norm ? for_variant<true, true>(go) : for_variant<true, false>(go);
  else
    norm ? for_variant<false, true>(go) : for_variant<false, false>(go);
  return true;
}

}  // namespace hearth::cuda
