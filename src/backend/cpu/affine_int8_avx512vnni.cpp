// int8-activation affine decode kernels with AVX512-VNNI's vpdpbusd on 256-bit vectors (Ice Lake,
// Sapphire Rapids, Zen 4): unsigned code bytes times signed activation bytes, four to an int32.
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni"))), \
                             apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")
#endif

#include "backend/cpu/affine_int8_kernels.h"

namespace hearth::cpu::affine_int8 {
namespace {

struct Avx512VnniOps {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
};

}  // namespace

void rows_avx512vnni(const Args& a, int64_t begin, int64_t end) {
  rows<Avx512VnniOps>(a, begin, end);
}

}  // namespace hearth::cpu::affine_int8

#if defined(__clang__)
#pragma clang attribute pop
#endif
