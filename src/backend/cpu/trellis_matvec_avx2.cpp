// AVX2 trellis matvec kernels: the 1MAD byte sum as two multiply-adds (bytes · 1 summed in pairs,
// then the pairs) instead of seven shifts, masks and adds.
#if !defined(__clang__)
// GCC 12's intrinsic headers use self-initialised "undefined" vectors that trip these warnings
// once inlined (a known header bug); the code is fine.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "quant/trellis.h"

// Every function below, the kernel templates included, is compiled for these features (the
// dispatcher checks them first); the headers above stay baseline.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif

#include "backend/cpu/trellis_matvec_kernels.h"

namespace hearth::cpu::trellis {
namespace {

struct Avx2Ops : GenericOps {
  static void byte_sum(const V8u& z, V8f& out) {
    const __m256i pairs = _mm256_maddubs_epi16(__m256i(z), _mm256_set1_epi8(1));
    const __m256i sum = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    out = V8f(_mm256_cvtepi32_ps(_mm256_sub_epi32(sum, _mm256_set1_epi32(510))));
  }
};

}  // namespace

void gather_avx2(const Args& a, int k, int64_t begin, int64_t end) {
  gather<Avx2Ops>(a, k, begin, end);
}
void scatter_avx2(const Args& a, int k, int64_t begin, int64_t end) {
  scatter<Avx2Ops>(a, k, begin, end);
}

}  // namespace hearth::cpu::trellis

#if defined(__clang__)
#pragma clang attribute pop
#endif
