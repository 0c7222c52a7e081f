// The batch-invariant product of --deterministic: y[n, out] = x[n, in] · w[out, in]ᵀ on the
// tensor cores with one reduction order for every row count. Each output is a single f32
// accumulator fed by mma.m16n8k16 over k = 0, 16, 32, ... in order, x always the A operand and W
// the B operand, so a row's outputs are the same bits whether it is multiplied alone, among the
// rows of a decode step or in a prompt chunk: the tile shapes below follow n for speed only, and
// no shape splits K. (cuBLASLt picks its kernel and split-K per shape, so its rows change with
// their neighbours' count.)
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/mma_util.cuh"

namespace hearth::cuda {

namespace {

constexpr int kBK = 64;         // K per stage: one 128-byte row of 8 swizzled chunks per tile row
constexpr int kRowBytes = 128;  // a tile row in shared memory

struct FixedArgs {
  const __nv_bfloat16* x;
  const __nv_bfloat16* w;
  void* y;
  const void* bias;
  int64_t n, out, in, ldy;
  float scale;
  int32_t ydt, bias_dt;
  bool accumulate;
};

// W stored transposed (Wᵀ [in, out], a dequantized transposed trellis matrix): its tile is BK
// rows of k, each BN outputs wide plus 16 bytes of padding (ldmatrix .trans reads 8 rows of one
// 16-byte column without bank conflicts), and the fragments come out transposed into the same
// registers, so both layouts feed the mma the same values in the same order.
template <int BN>
constexpr int kWtRowBytes = BN * 2 + 16;

// Block tile BM rows of x × BN rows of W; WM × WN warps, each (BM/WM) × (BN/WN) as MT m16 tiles ×
// NT n8 tiles; STAGES tiles of K in flight through cp.async.
template <int BM, int BN, int WM, int WN, int STAGES, bool kWT>
__global__ void __launch_bounds__(WM* WN * 32) linear_fixed_kernel(FixedArgs a) {
  constexpr int kThreads = WM * WN * 32, MT = BM / WM / 16, NT = BN / WN / 8;
  constexpr int kWBytes = kWT ? kBK * kWtRowBytes<BN> : BN * kRowBytes;
  constexpr int kStageBytes = BM * kRowBytes + kWBytes;
  static_assert(MT >= 1 && NT >= 2 && NT % 2 == 0, "warp tiles of m16 × pairs of n8");
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = smem_u32(smem);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int64_t m0 = int64_t(blockIdx.y) * BM, n0 = int64_t(blockIdx.x) * BN;
  const int64_t k_tiles = (a.in + kBK - 1) / kBK;

  // Stage s holds x rows m0.. (tile rows 0..BM-1), then W rows n0.. (tile rows BM..BM+BN-1), or
  // Wᵀ's rows k0..k0+BK-1 (kWT); chunks past `in` and rows past n or out are zeros (their
  // products add exact zeros).
  auto load = [&](int64_t kt, int stage) {
    const uint32_t s = base + uint32_t(stage * kStageBytes);
    const int64_t k0 = kt * kBK;
    constexpr int kWChunks = kWT ? kBK * (BN / 8) : BN * 8;
    for (int i = threadIdx.x; i < BM * 8 + kWChunks; i += kThreads) {
      if (i < BM * 8) {
        const int r = i >> 3, c = i & 7;
        const int64_t row = m0 + r, k = k0 + c * 8;
        const bool valid = row < a.n && k < a.in;
        cp_async16(s + swz<kBK>(r, c), a.x + (valid ? row * a.in + k : 0), valid);
      } else if constexpr (kWT) {
        const int j = i - BM * 8, r = j / (BN / 8), c = j % (BN / 8);
        const int64_t k = k0 + r, col = n0 + c * 8;
        const bool valid = k < a.in && col < a.out;
        cp_async16(s + BM * kRowBytes + r * kWtRowBytes<BN> + c * 16,
                   a.w + (valid ? k * a.out + col : 0), valid);
      } else {
        const int r = (i >> 3) - BM, c = i & 7;
        const int64_t row = n0 + r, k = k0 + c * 8;
        const bool valid = row < a.out && k < a.in;
        cp_async16(s + swz<kBK>(BM + r, c), a.w + (valid ? row * a.in + k : 0), valid);
      }
    }
  };

  float acc[MT][NT][4] = {};
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load(s, s);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    // Refill the stage consumed last iteration before computing on this one.
    if (kt + STAGES - 1 < k_tiles) load(kt + STAGES - 1, int((kt + STAGES - 1) % STAGES));
    cp_async_commit();
    const uint32_t s = base + uint32_t((kt % STAGES) * kStageBytes);
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)  // lanes 0-15 rows 0-15 at k 0-7, lanes 16-31 at k 8-15
        ldsm_x4(s + swz<kBK>(wm * (BM / WM) + mt * 16 + (lane & 15), 2 * kk + (lane >> 4)), af[mt]);
#pragma unroll
      for (int nt = 0; nt < NT; nt += 2) {
        // Matrices (n-tile nt, k 0-7), (nt, k 8-15), (nt+1, k 0-7), (nt+1, k 8-15).
        const int i = lane >> 3;
        const int n_in = wn * (BN / WN) + nt * 8 + ((i >> 1) << 3);  // the matrix's first output
        uint32_t b[4];
        if constexpr (kWT)  // rows of k: lane (l & 7) gives k row 16kk + 8(i & 1) + (l & 7)
          ldsm_x4_trans(s + BM * kRowBytes +
                            (16 * kk + 8 * (i & 1) + (lane & 7)) * kWtRowBytes<BN> + n_in * 2,
                        b);
        else
          ldsm_x4(s + swz<kBK>(BM + n_in + (lane & 7), 2 * kk + (i & 1)), b);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(acc[mt][nt], af[mt], b[0], b[1]);
          mma_bf16(acc[mt][nt + 1], af[mt], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int h = 0; h < 4; ++h) {
        const int64_t row = m0 + wm * (BM / WM) + mt * 16 + g + (h >> 1) * 8;
        const int64_t col = n0 + wn * (BN / WN) + nt * 8 + 2 * t + (h & 1);
        if (row >= a.n || col >= a.out) continue;
        float v = acc[mt][nt][h] + (a.bias ? ld(a.bias, a.bias_dt, col) : 0.0f);
        const int64_t at = row * a.ldy + col;
        if (a.accumulate) v = ld(a.y, a.ydt, at) + v * a.scale;
        st(a.y, a.ydt, at, v);
      }
}

template <int BM, int BN, int WM, int WN, int STAGES>
struct Config {
  template <bool kWT>
  static constexpr size_t kSmem = size_t(STAGES) *
                                  (BM * kRowBytes + (kWT ? kBK * kWtRowBytes<BN> : BN * kRowBytes));
  static void allow() {
    allow_smem(linear_fixed_kernel<BM, BN, WM, WN, STAGES, false>, kSmem<false>);
    allow_smem(linear_fixed_kernel<BM, BN, WM, WN, STAGES, true>, kSmem<true>);
  }
  static void launch(Ctx& ctx, const FixedArgs& a, bool w_transposed) {
    const dim3 grid(unsigned((a.out + BN - 1) / BN), unsigned((a.n + BM - 1) / BM));
    if (w_transposed)
      linear_fixed_kernel<BM, BN, WM, WN, STAGES, true>
          <<<grid, WM * WN * 32, kSmem<true>, ctx.stream>>>(a);
    else
      linear_fixed_kernel<BM, BN, WM, WN, STAGES, false>
          <<<grid, WM * WN * 32, kSmem<false>, ctx.stream>>>(a);
    HEARTH_CUDA_LAUNCHED();
  }
};
// Shapes by rows, for speed only (the sums are the same in each): decode-sized calls get narrow
// column tiles and a deep ring so that a matrix streams through enough blocks; prompt chunks get
// large tiles that reuse each loaded row.
using Few = Config<16, 32, 1, 2, 8>;     // up to 16 rows
using Some = Config<64, 64, 2, 2, 4>;    // up to 64
using Many = Config<128, 128, 2, 4, 3>;  // more

}  // namespace

void linear_fixed_init() {
  Few::allow();
  Some::allow();
  Many::allow();
}

bool linear_fixed_fits(const Ten& y, const Ten& x, const Ten& w) {
  return x.dtype == kBF16 && w.dtype == kBF16 && (y.dtype == kBF16 || y.dtype == kF32) &&
         x.cols() % 8 == 0 && aligned16(x.p) && aligned16(w.p) && x.rows() <= int64_t(65535) * 16;
}

void linear_fixed(Ctx& ctx, const Ten& y, int64_t ldy, const Ten& x, const void* w, int64_t out,
                  const Ten& bias, float scale, bool accumulate, bool w_transposed) {
  Ten wt;
  wt.p = const_cast<void*>(w);
  wt.dtype = kBF16;
  if (!linear_fixed_fits(y, x, wt))
    cuda_fail("linear_fixed", "bf16 x with 16-byte aligned rows of a multiple of 8 is needed",
              __FILE__, __LINE__);
  FixedArgs a;
  a.x = static_cast<const __nv_bfloat16*>(x.p);
  a.w = static_cast<const __nv_bfloat16*>(w);
  a.y = y.p;
  a.bias = bias.p;
  a.n = x.rows();
  a.out = out;
  a.in = x.cols();
  a.ldy = ldy;
  a.scale = scale;
  a.ydt = y.dtype;
  a.bias_dt = bias.dtype;
  a.accumulate = accumulate;
  if (a.n <= 0 || out <= 0) return;
  if (w_transposed && out % 8 != 0)  // Wᵀ's rows move in 16-byte chunks of outputs
    cuda_fail("linear_fixed", "Wᵀ needs a multiple of 8 outputs", __FILE__, __LINE__);
  if (a.n <= 16)
    Few::launch(ctx, a, w_transposed);
  else if (a.n <= 64)
    Some::launch(ctx, a, w_transposed);
  else
    Many::launch(ctx, a, w_transposed);
}

}  // namespace hearth::cuda
