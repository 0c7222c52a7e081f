// AVX-512 matmul kernels for small n (decode GEMV, speculative/batched rows) and the fallback for
// F16/F32 weights at any n. A block of R weight rows is streamed with 64-byte loads, R rows in
// flight, against up to 4 rows of x at a time; for n > 4 the same R rows are re-read from L1 for
// the next 4 rows of x, so weights come from memory once per call whatever n is.
// BF16 weights: a 64-byte load holds 32 bf16; (v << 16) gives the even elements as f32 and
// (v & 0xffff0000) the odd ones, so x is packed even/odd-permuted per 32-chunk (pack_x).
// Accumulation is plain f32 FMA: exact products, f32 sums.
// GCC 12's intrinsic headers use self-initialised "undefined" vectors that trip these warnings
// once inlined (a known header bug); the code is fine.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "backend/cpu/matmul_kernels.h"

// Every function below is compiled for these features (the dispatcher checks them first);
// the headers above stay baseline.
#if defined(__clang__)
#pragma clang attribute push( \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")
#endif

// Tuning knobs (overridable at build time for experiments): weight rows in flight per block,
// and the prefetch scheme: 0 none, 1 each row 1 KiB ahead, 2 the next row block (linear).
#ifndef HEARTH_MATMUL_ROWS
#define HEARTH_MATMUL_ROWS 8
#endif
#ifndef HEARTH_MATMUL_PREFETCH
#define HEARTH_MATMUL_PREFETCH 2
#endif
#ifndef HEARTH_MATMUL_PF_HINT
#define HEARTH_MATMUL_PF_HINT \
  _MM_HINT_T1  // into L2: keeps L1 fill buffers free for demand loads (+10-15% GEMV bandwidth)
#endif

namespace hearth::cpu::detail {
namespace {

// Loads 32 weights starting at element k of row p as two f32 vectors (w0, w1) matching the
// packed x halves; `m` masks the valid elements (all ones except in the tail chunk).
template <DType WT>
inline void load_w(const void* row, int64_t k, __mmask32 m, __m512& w0, __m512& w1) {
  if constexpr (WT == DType::BF16) {
    const uint16_t* p = static_cast<const uint16_t*>(row) + k;
    __m512i v = m == __mmask32(~0u) ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(m, p);
    w0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    w1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u))));
  } else if constexpr (WT == DType::F16) {
    const uint16_t* p = static_cast<const uint16_t*>(row) + k;
    __m512i v = m == __mmask32(~0u) ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(m, p);
    w0 = _mm512_cvtph_ps(_mm512_castsi512_si256(v));
    w1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1));
  } else {
    const float* p = static_cast<const float*>(row) + k;
    if (m == __mmask32(~0u)) {
      w0 = _mm512_loadu_ps(p);
      w1 = _mm512_loadu_ps(p + 16);
    } else {
      w0 = _mm512_maskz_loadu_ps(__mmask16(m), p);
      w1 = _mm512_maskz_loadu_ps(__mmask16(m >> 16), p + 16);
    }
  }
}

// Horizontal sum (GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized).
inline float hsum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));
  __m128 s = _mm512_castps512_ps128(v);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <DType WT>
constexpr int64_t elem_size() {
  return WT == DType::F32 ? 4 : 2;
}

// y[j0 .. j0+N, o .. o+R) for R weight rows against N rows of packed x.
template <DType WT, int R, int N>
inline void block(const MatmulArgs& a, int64_t o, int64_t j0) {
  __m512 acc[R][N];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j) acc[r][j] = _mm512_setzero_ps();
  const char* rows[R];
  for (int r = 0; r < R; ++r)
    rows[r] = static_cast<const char*>(a.w) + (o + r) * a.k * elem_size<WT>();
  const float* xs[N];
  for (int j = 0; j < N; ++j) xs[j] = a.xp + (j0 + j) * a.kpad;

  const int64_t kfull = a.k & ~int64_t(31);
  auto step = [&](int64_t k, __mmask32 m) __attribute__((always_inline)) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 w0, w1;
      load_w<WT>(rows[r], k, m, w0, w1);
#pragma GCC unroll 4
      for (int j = 0; j < N; ++j) {
        acc[r][j] = _mm512_fmadd_ps(w0, _mm512_load_ps(xs[j] + k), acc[r][j]);
        acc[r][j] = _mm512_fmadd_ps(w1, _mm512_load_ps(xs[j] + k + 16), acc[r][j]);
      }
    }
  };
  int64_t k = 0;
  for (; k < kfull; k += 32) {
    // Prefetch ahead in every row stream: the hardware streamer tracks a few streams, but
    // R rows x 2 threads is more than it covers comfortably.
    if constexpr (HEARTH_MATMUL_PREFETCH == 1) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) _mm_prefetch(rows[r] + k * elem_size<WT>() + 1024, _MM_HINT_T0);
    } else if constexpr (HEARTH_MATMUL_PREFETCH == 2) {
      // A thread's rows are one contiguous region: while this block eats R * 32 elements per
      // step, fetch the same number of bytes of the next block, front to back, so every row
      // start is already in flight (rows of 1024 bf16 are only 2 KiB: per-row-ahead misses
      // their first KiB).
      const char* next = rows[0] + R * a.k * elem_size<WT>() + R * k * elem_size<WT>();
      constexpr int lines = int(R * elem_size<WT>() / 2);  // bytes eaten per step / 64
      for (int l = 0; l < lines; ++l) _mm_prefetch(next + 64 * l, HEARTH_MATMUL_PF_HINT);
    }
    step(k, __mmask32(~0u));
  }
  if (k < a.k) step(k, __mmask32((1u << (a.k - k)) - 1));

#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float b = bias_at(a, o + r);
#pragma GCC unroll 4
    for (int j = 0; j < N; ++j) a.y[(j0 + j) * a.out + o + r] = hsum(acc[r][j]) + b;
  }
}

template <DType WT, int R>
inline void row_group(const MatmulArgs& a, int64_t o) {
  int64_t j = 0;
  for (; j + 4 <= a.n; j += 4) block<WT, R, 4>(a, o, j);
  switch (a.n - j) {
    case 3:
      block<WT, R, 3>(a, o, j);
      break;
    case 2:
      block<WT, R, 2>(a, o, j);
      break;
    case 1:
      block<WT, R, 1>(a, o, j);
      break;
    default:
      break;
  }
}

template <DType WT, int R>
void rows_by(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  for (; o + R <= o_end; o += R) row_group<WT, R>(a, o);
  for (; o < o_end; ++o) row_group<WT, 1>(a, o);
}

// With 3 or 4 rows of x in a block, 8 weight rows would need 24-32 accumulators and spill;
// 5 weight rows keep accumulators, x and weights in the 32 registers (batched decode of 8
// sequences: +20 % on a 2-core Zen 4).
template <DType WT>
void rows(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  if (a.n >= 3) return rows_by<WT, 5>(a, o_begin, o_end);
  rows_by<WT, HEARTH_MATMUL_ROWS>(a, o_begin, o_end);
}

}  // namespace

void matmul_rows_avx512(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  switch (a.w_dtype) {
    case DType::BF16:
      rows<DType::BF16>(a, o_begin, o_end);
      break;
    case DType::F16:
      rows<DType::F16>(a, o_begin, o_end);
      break;
    default:
      rows<DType::F32>(a, o_begin, o_end);
      break;
  }
}

}  // namespace hearth::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#endif
