// AVX2 MLX-affine decode kernels: a 16-float vector is two ymm registers (accumulators beyond
// 4 input rows spill to L1), and 2, 3, 5 and 6-bit codes spread to bytes with BMI2 pdep.
#if !defined(__clang__)
// GCC 12's intrinsic headers use self-initialised "undefined" vectors that trip these warnings
// once inlined (a known header bug); the code is fine.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

// Every function below, the kernel templates included, is compiled for these features (the
// dispatcher checks them first); the headers above stay baseline.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,bmi2"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,bmi2")
#endif

#include "backend/cpu/affine_matvec_kernels.h"

namespace hearth::cpu::affine {
namespace {

struct Avx2Ops {
  static void to_float(const V16b& v, V16f& out) {
    const __m128i b = __m128i(v);
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(b, b)));
    std::memcpy(&out, &lo, 32);
    std::memcpy(reinterpret_cast<char*>(&out) + 32, &hi, 32);
  }
  template <int Bits>
  static uint64_t spread8(uint64_t v) {
    return _pdep_u64(v, spread_mask<Bits>());
  }
};

}  // namespace

void rows_avx2(const Args& a, int64_t begin, int64_t end) { rows<Avx2Ops>(a, begin, end); }
void dequantize_avx2(const Args& a, int64_t begin, int64_t end, float* out) {
  dequantize<Avx2Ops>(a, begin, end, out);
}

}  // namespace hearth::cpu::affine

#if defined(__clang__)
#pragma clang attribute pop
#endif
