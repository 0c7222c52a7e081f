// int8-activation affine decode kernels with AVX-VNNI's vpdpbusd (the VEX encoding: Alder Lake and
// later, Zen 4), for CPUs that have it without AVX512-VNNI.
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#include "backend/cpu/affine_int8_kernels.h"

namespace hearth::cpu::affine_int8 {
namespace {

struct AvxVnniOps {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
};

}  // namespace

void rows_avxvnni(const Args& a, int64_t begin, int64_t end) { rows<AvxVnniOps>(a, begin, end); }

}  // namespace hearth::cpu::affine_int8

#if defined(__clang__)
#pragma clang attribute pop
#endif
