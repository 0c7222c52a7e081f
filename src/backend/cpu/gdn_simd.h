// Vector helpers shared by the Gated DeltaNet CPU kernels (gated_delta.cpp, conv1d.cpp): a
// 16-float GCC vector type, a vectorised exp (glibc's expf is scalar without -ffast-math, and
// the conv's SiLU, the gated norm and the chunked decay masks call it millions of times per
// layer), and the run-time ISA choice. Everything here is always_inline so that it compiles
// under the target attribute of the kernel that includes it (baseline, AVX2+FMA or AVX-512).
#pragma once
// Passing 64-byte vectors by value changes the ABI between targets; harmless here because every
// function taking or returning one is always_inline (no call ever crosses a target boundary).
#pragma GCC diagnostic ignored "-Wpsabi"
#include <cstdint>
#include <cstring>

#define GDN_INLINE inline __attribute__((always_inline))

namespace hearth::cpu::gdn {

// 16 floats: one zmm in the AVX-512 build (two ymm / four xmm in the others).
typedef float v16 __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

GDN_INLINE v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
GDN_INLINE void store16(float* p, v16 v) { std::memcpy(p, &v, sizeof v); }
GDN_INLINE v16 splat16(float x) { return v16{} + x; }

// e^x in f32, within ~2 ulp of expf (Cephes expf: x = n·ln2 + r, |r| ≤ ln2/2, degree-6
// polynomial for e^r, 2^n built in the exponent field). Below -87.3 it returns 0 (expf would
// give a subnormal, which the kernels flush anyway); above 88.3 it saturates at e^88.3 (finite).
GDN_INLINE v16 exp16(v16 x) {
  const v16 lo = splat16(-87.3f), hi = splat16(88.3f);
  const v16 xc = x < lo ? lo : (x > hi ? hi : x);
  // Round to nearest with the 1.5·2^23 trick (no rounding intrinsic in the generic vector type).
  const v16 magic = splat16(12582912.0f);
  const v16 fn = (xc * 1.44269504088896341f + magic) - magic;
  const v16 r = (xc - fn * 0.693359375f) - fn * -2.12194440e-4f;
  v16 p = splat16(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const v16i e = (__builtin_convertvector(fn, v16i) + 127) << 23;
  v16 scale;
  std::memcpy(&scale, &e, sizeof scale);
  const v16 y = p * scale;
  return x < lo ? v16{} : y;
}

// x · sigmoid(x), as transformers' silu.
GDN_INLINE v16 silu16(v16 x) { return x / (1.0f + exp16(-x)); }

// Σ x[i]² in 16 lanes, then the lanes in order, then the tail: an in-order scalar sum is a
// 4-cycle add chain per element. One order for every caller, so their results agree bitwise.
GDN_INLINE float sum_squares(const float* x, int64_t n) {
  v16 sq{};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const v16 v = load16(x + i);
    sq += v * v;
  }
  float sum = 0.0f;
  for (int l = 0; l < 16; ++l) sum += sq[l];
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

enum class Isa { Baseline, Avx2, Avx512 };

inline Isa isa() {
  static const Isa chosen = [] {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq"))
      return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Isa::Avx2;
#endif
    return Isa::Baseline;
  }();
  return chosen;
}

}  // namespace hearth::cpu::gdn

#if defined(__x86_64__)
#define GDN_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")))
#define GDN_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif
