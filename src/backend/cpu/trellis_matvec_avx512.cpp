// AVX-512 trellis matvec kernels (VL on 8-lane vectors, 32 registers), for CPUs with VNNI and
// VBMI2: the 1MAD byte sum, centring included, is one vpdpbusd; a window that straddles two
// words is one funnel shift (vpshrdd).
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
#pragma clang attribute push(                                                        \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi2,fma"))), \
    apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi2,fma")
#endif

#include "backend/cpu/trellis_matvec_kernels.h"

namespace hearth::cpu::trellis {
namespace {

struct Avx512Ops {
  template <int S>
  static void window(const V8u& lo, const V8u& hi, V8u& v) {
    if constexpr (S > 32 - quant::TrellisSpec::kStateBits)
      v = V8u(_mm256_shrdi_epi32(__m256i(lo), __m256i(hi), S));
    else
      v = lo >> S;
  }
  static void byte_sum(const V8u& z, V8f& out) {
    const __m256i sum =
        _mm256_dpbusd_epi32(_mm256_set1_epi32(-510), __m256i(z), _mm256_set1_epi8(1));
    out = V8f(_mm256_cvtepi32_ps(sum));
  }
};

}  // namespace

void gather_avx512(const Args& a, int k, int64_t begin, int64_t end) {
  gather<Avx512Ops>(a, k, begin, end);
}
void scatter_avx512(const Args& a, int k, int64_t begin, int64_t end) {
  scatter<Avx512Ops>(a, k, begin, end);
}

}  // namespace hearth::cpu::trellis

#if defined(__clang__)
#pragma clang attribute pop
#endif
