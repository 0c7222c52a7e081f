// AVX-512 MLX-affine decode kernels: 16-float vectors are single zmm registers (32 of them hold
// 8 input rows' accumulators), and 2, 3, 5 and 6-bit codes spread to bytes with BMI2 pdep.
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
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,fma,bmi2"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512bw,avx512vl,fma,bmi2")
#endif

#include "backend/cpu/affine_matvec_kernels.h"

namespace hearth::cpu::affine {
namespace {

struct Avx512Ops {
  static void to_float(const V16b& v, V16f& out) {
    out = V16f(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(__m128i(v))));
  }
  template <int Bits>
  static uint64_t spread8(uint64_t v) {
    return _pdep_u64(v, spread_mask<Bits>());
  }
};

}  // namespace

void rows_avx512(const Args& a, int64_t begin, int64_t end) { rows<Avx512Ops>(a, begin, end); }
void dequantize_avx512(const Args& a, int64_t begin, int64_t end, float* out) {
  dequantize<Avx512Ops>(a, begin, end, out);
}

}  // namespace hearth::cpu::affine

#if defined(__clang__)
#pragma clang attribute pop
#endif
