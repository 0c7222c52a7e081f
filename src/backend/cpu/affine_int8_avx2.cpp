// int8-activation affine decode kernels on plain AVX2 (vpmaddubsw + vpmaddwd): 4-bit codes keep
// its 16-bit pair sums from saturating (15·127·2 < 32767).
#if !defined(__clang__)
// GCC 12's intrinsic headers use self-initialised "undefined" vectors that trip these warnings
// once inlined (a known header bug); the code is fine.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

// Every function below, the kernel templates included, is compiled for these features (the
// dispatcher checks them first); the headers above stay baseline.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include "backend/cpu/affine_int8_kernels.h"

namespace hearth::cpu::affine_int8 {
namespace {

struct Avx2Ops {
  static __m256i dot(__m256i acc, __m256i u,
                     __m256i s) {  // Pairs of u8·s8 products into i16 (4-bit codes: |15·127·2|
                                   // cannot saturate), then into i32.
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
};

}  // namespace

void rows_avx2(const Args& a, int64_t begin, int64_t end) { rows<Avx2Ops>(a, begin, end); }

}  // namespace hearth::cpu::affine_int8

#if defined(__clang__)
#pragma clang attribute pop
#endif
