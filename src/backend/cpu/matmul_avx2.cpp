// AVX2+FMA+F16C matmul kernels for CPUs without AVX-512: same structure as matmul_avx512.cpp
// (R weight rows in flight against up to 4 rows of x, weights streamed once per call), with
// 32-byte vectors, so BF16 weights split even/odd per 16-chunk and x is packed with chunk 16.
// The tail chunk is copied into a zero-padded stack buffer, as AVX2 has no masked 16-bit loads.
// GCC 12's intrinsic headers use self-initialised "undefined" vectors that trip these warnings
// once inlined (a known header bug); the code is fine.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "backend/cpu/matmul_kernels.h"

// Every function below is compiled for these features (the dispatcher checks them first);
// the headers above stay baseline.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

namespace hearth::cpu::detail {
namespace {

template <DType WT>
constexpr int64_t elem_size() {
  return WT == DType::F32 ? 4 : 2;
}

// 16 weights at p (already bounds-safe) as two f32 vectors matching the packed x halves.
template <DType WT>
inline void load_w(const char* p, __m256& w0, __m256& w1) {
  if constexpr (WT == DType::BF16) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u))));
  } else if constexpr (WT == DType::F16) {
    w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  } else {
    w0 = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    w1 = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8);
  }
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <DType WT, int R, int N>
inline void block(const MatmulArgs& a, int64_t o, int64_t j0) {
  constexpr int64_t es = elem_size<WT>();
  __m256 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < N; ++j) acc[r][j] = _mm256_setzero_ps();
  const char* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = static_cast<const char*>(a.w) + (o + r) * a.k * es;
  const float* xs[N];
  for (int j = 0; j < N; ++j) xs[j] = a.xp + (j0 + j) * a.kpad;

  auto step = [&](int64_t k, const char* const* src) __attribute__((always_inline)) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 w0, w1;
      load_w<WT>(src[r], w0, w1);
#pragma GCC unroll 4
      for (int j = 0; j < N; ++j) {
        acc[r][j] = _mm256_fmadd_ps(w0, _mm256_load_ps(xs[j] + k), acc[r][j]);
        acc[r][j] = _mm256_fmadd_ps(w1, _mm256_load_ps(xs[j] + k + 8), acc[r][j]);
      }
    }
  };
  const int64_t kfull = a.k & ~int64_t(15);
  int64_t k = 0;
  for (; k < kfull; k += 16) {
    const char* src[R];
    for (int r = 0; r < R; ++r) src[r] = rows[r] + k * es;
    step(k, src);
  }
  if (k < a.k) {
    alignas(32) char tail[R][64] = {};
    const char* src[R];
    for (int r = 0; r < R; ++r) {
      std::memcpy(tail[r], rows[r] + k * es, size_t((a.k - k) * es));
      src[r] = tail[r];
    }
    step(k, src);
  }
  for (int r = 0; r < R; ++r) {
    const float b = bias_at(a, o + r);
    for (int j = 0; j < N; ++j) a.y[(j0 + j) * a.out + o + r] = hsum(acc[r][j]) + b;
  }
}

template <DType WT, int R>
inline void row_group(const MatmulArgs& a, int64_t o) {
  int64_t j = 0;
  for (; j + 3 <= a.n; j += 3) block<WT, R, 3>(a, o, j);
  switch (a.n - j) {
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

template <DType WT>
void rows(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
  int64_t o = o_begin;
  for (; o + 4 <= o_end; o += 4) row_group<WT, 4>(a, o);
  for (; o < o_end; ++o) row_group<WT, 1>(a, o);
}

}  // namespace

void matmul_rows_avx2(const MatmulArgs& a, int64_t o_begin, int64_t o_end) {
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
