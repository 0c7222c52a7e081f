// AVX-512 GEMM for prefill (many rows of x) on CPUs without AMX, and for F16/F32 weights on
// any AVX-512 CPU. The row kernels (matmul_avx512.cpp) keep one accumulator per (weight row,
// x row) and sum it horizontally at the end; with 4 x rows and 8 weight rows that is every
// vector register, so they spill. This is the register-blocked outer product BLAS libraries
// use instead: a panel of 64 output columns × kKC inputs is converted once to f32 and stored
// k-major (one 64-byte line per 16 columns and input), then every 6-row tile of x runs over it
// with 24 accumulators, each FMA taking one broadcast input and 16 columns. Products are exact
// (bf16 and f16 weights are exact in f32), sums f32, as in the row kernels.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/matmul_kernels.h"
#include "core/buffer.h"

#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif

namespace hearth::cpu::detail {
namespace {

constexpr int kMR = 6;             // rows of x per tile
constexpr int kNB = 4;             // 16-column vectors per tile
constexpr int64_t kNC = kNB * 16;  // output columns per panel
constexpr int64_t kKC = 512;       // inputs per panel: 128 KiB of f32, resident in L2

// r[i] lane j → r[j] lane i for 16 vectors of 16 floats (32-bit, then 64-bit interleaves within
// 128-bit lanes, then a 4×4 transpose of the 128-bit lanes).
inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + m], 128-bit lane q: rows 4g..4g+3 at column 4q + m.
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  for (int m = 0; m < 4; ++m) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xdd);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xdd);
    r[m] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    r[8 + m] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
    r[4 + m] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    r[12 + m] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
  }
}

// 16 bf16 weight rows × 32 inputs into the panel (dst = panel + kk·64 + c): each row's 32 values
// split into even and odd inputs as f32 (a bf16 is an f32's top half), and both 16×16 blocks
// transposed so that each input's 16 columns are one store.
inline void pack_bf16_16x32(const uint16_t* const (&rows)[16], float* dst) {
  __m512 even[16], odd[16];
  for (int i = 0; i < 16; ++i) {
    const __m512i v = _mm512_loadu_si512(rows[i]);
    even[i] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    odd[i] = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
  }
  transpose16(even);
  transpose16(odd);
  for (int l = 0; l < 16; ++l) {
    _mm512_store_ps(dst + 2 * l * kNC, even[l]);
    _mm512_store_ps(dst + (2 * l + 1) * kNC, odd[l]);
  }
}

// panel[kk·64 + c] = W[o0 + c, k0 + kk] as f32 for kk < kc; columns at or past o_end are 0.
template <DType WT>
void pack_panel(const MatmulArgs& a, int64_t o0, int64_t o_end, int64_t k0, int64_t kc,
                float* panel) {
  int64_t c_done = 0, kk_done = 0;
  if constexpr (WT == DType::BF16) {
    // Whole groups of 16 columns and 32 inputs through registers; the rest below.
    const int64_t groups = std::min<int64_t>(kNC, o_end - o0) / 16, kfull = kc / 32 * 32;
    for (int64_t g = 0; g < groups; ++g) {
      const uint16_t* rows[16];
      for (int i = 0; i < 16; ++i)
        rows[i] = static_cast<const uint16_t*>(a.w) + (o0 + g * 16 + i) * a.k + k0;
      for (int64_t kk = 0; kk < kfull; kk += 32) {
        const uint16_t* at[16];
        for (int i = 0; i < 16; ++i) at[i] = rows[i] + kk;
        pack_bf16_16x32(at, panel + kk * kNC + g * 16);
      }
    }
    c_done = groups * 16;
    kk_done = kfull;
    // The vector part's columns past kfull.
    for (int64_t c = 0; c < c_done; ++c) {
      const uint16_t* row = static_cast<const uint16_t*>(a.w) + (o0 + c) * a.k + k0;
      for (int64_t kk = kk_done; kk < kc; ++kk) panel[kk * kNC + c] = bf16_to_f32(row[kk]);
    }
  }
  for (int64_t c = c_done; c < kNC; ++c) {
    const int64_t o = o0 + c;
    if (o >= o_end) {
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kNC + c] = 0.0f;
      continue;
    }
    if constexpr (WT == DType::BF16) {
      const uint16_t* row = static_cast<const uint16_t*>(a.w) + o * a.k + k0;
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kNC + c] = bf16_to_f32(row[kk]);
    } else if constexpr (WT == DType::F16) {
      const uint16_t* row = static_cast<const uint16_t*>(a.w) + o * a.k + k0;
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kNC + c] = f16_to_f32(row[kk]);
    } else {
      const void* row = static_cast<const char*>(a.w) + (o * a.k + k0) * 4;
      for (int64_t kk = 0; kk < kc; ++kk) panel[kk * kNC + c] = load_scalar(row, WT, kk);
    }
  }
}

// y[0..MR) × 64 columns (+)= x[0..MR) × panel, x rows ldx apart, y rows ldy apart. The first
// k block stores (with the bias), later ones add.
template <int MR>
void tile(const float* panel, int64_t kc, const float* x, int64_t ldx, float* y, int64_t ldy,
          const __mmask16 (&mask)[kNB], const __m512 (&bias)[kNB], bool first) {
  __m512 acc[MR][kNB];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < kNB; ++c) acc[r][c] = _mm512_setzero_ps();
  for (int64_t kk = 0; kk < kc; ++kk) {
    const float* w = panel + kk * kNC;
    const __m512 w0 = _mm512_load_ps(w), w1 = _mm512_load_ps(w + 16);
    const __m512 w2 = _mm512_load_ps(w + 32), w3 = _mm512_load_ps(w + 48);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * ldx + kk]);
      acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(xb, w2, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(xb, w3, acc[r][3]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < kNB; ++c) {
      float* dst = y + r * ldy + c * 16;
      const __m512 prev = first ? bias[c] : _mm512_maskz_loadu_ps(mask[c], dst);
      _mm512_mask_storeu_ps(dst, mask[c], _mm512_add_ps(prev, acc[r][c]));
    }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t,
                        const __mmask16 (&)[kNB], const __m512 (&)[kNB], bool);
constexpr TileFn kTiles[kMR + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

template <DType WT>
void gemm(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  thread_local Buffer panel_buf;
  const size_t panel_bytes = size_t(kKC * kNC) * sizeof(float);
  if (panel_buf.size() < panel_bytes) panel_buf.reserve(panel_bytes);
  float* panel = static_cast<float*>(panel_buf.data());
  for (int64_t o0 = o_begin; o0 < o_end; o0 += kNC) {
    __mmask16 mask[kNB];
    __m512 bias[kNB];
    for (int c = 0; c < kNB; ++c) {
      const int64_t valid = std::clamp<int64_t>(o_end - o0 - c * 16, 0, 16);
      mask[c] = __mmask16((1u << valid) - 1u);
      alignas(64) float b[16] = {};
      for (int64_t i = 0; i < valid; ++i) b[i] = bias_at(a, o0 + c * 16 + i);
      bias[c] = _mm512_load_ps(b);
    }
    for (int64_t k0 = 0; k0 < a.k; k0 += kKC) {
      const int64_t kc = std::min(kKC, a.k - k0);
      pack_panel<WT>(a, o0, o_end, k0, kc, panel);
      for (int64_t j0 = 0; j0 < a.n; j0 += kMR) {
        const int rows = int(std::min<int64_t>(kMR, a.n - j0));
        kTiles[rows](panel, kc, a.x + j0 * a.k + k0, a.k, a.y + j0 * a.out + o0, a.out, mask, bias,
                     k0 == 0);
      }
    }
  }
}

}  // namespace

void matmul_cols_avx512_gemm(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.w_dtype) {
    case DType::BF16:
      return gemm<DType::BF16>(a, o_begin, o_end);
    case DType::F16:
      return gemm<DType::F16>(a, o_begin, o_end);
    default:
      return gemm<DType::F32>(a, o_begin, o_end);
  }
}

}  // namespace hearth::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#endif
