// Internal: the MLX-affine decode kernel on int8 activations (affine_matvec.h), as one template
// over the instruction that multiplies unsigned code bytes by signed activation bytes and sums
// groups of four into int32 lanes (VNNI's vpdpbusd, or AVX2's vpmaddubsw + vpmaddwd).
// A weight is s·q + b for its group, so a row's product with x is Σ_g s_g·Σ q·x + b_g·Σ x: the
// first sum runs on bytes against x quantized to int8 per 32 inputs (x ≈ dx·xq, dx = max|x|/127,
// as llama.cpp's Q8 activations), the second takes Σ x per group exactly, from f32 x.
// 4-bit codes: 64 inputs (two 32-blocks A, B) per step; 32 code bytes hold A's and B's codes,
// low nibbles the even ones, so x comes as [A even | B even | A odd | B odd] and each 32-bit lane
// sums four products of one block. 4-bit codes only: at 8 bits the activations' rounding would
// be most of the error (docs/design-notes.md, "CPU affine products on int8 activations").
// Include it after the file's target pragma and every other header (see the ISA files).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace hearth::cpu::affine_int8 {

// The scales' and biases' dtype, read where used (converting the whole matrix per call would
// write and read back more bytes than the codes take).
enum class ParamType { F32, BF16, F16 };

struct Args {
  const uint8_t* codes;  // [rows, cols/2]
  const void* scales;    // [rows, cols/group] of param_type
  const void* biases;    // [rows, cols/group] of param_type
  ParamType param_type;
  int64_t rows, cols;
  int bits, group;  // bits 4; cols a multiple of 64
  int64_t n;
  // The decode kernels' layout (gemm_avx512vnni: natural order, one dx per block):
  const int8_t* xq;   // [n, cols], 4-bit: each 64 inputs as [A even | B even | A odd | B odd]
  const float* xdx;   // [n, cols/64, 8] = dx_A ×4, dx_B ×4
  const float* gsum;  // [n, cols/group]: Σ x of each group
  float* y;           // [n, rows]
};

void rows_avx512vnni(const Args& a, int64_t begin, int64_t end);
void rows_avxvnni(const Args& a, int64_t begin, int64_t end);
void rows_avx2(const Args& a, int64_t begin, int64_t end);

// Many input rows (prefill), AVX512-VNNI only (affine_int8_gemm_avx512.cpp): output rows
// [begin, end), begin a multiple of 32; x in natural order (xq [n, cols], xdx [n, cols/32]).
void gemm_avx512vnni(const Args& a, int64_t begin, int64_t end);
// x [n, cols] rounded to int8 per 32-value block in the GEMM's natural order: xq[i] =
// round_even(x[i] · 127 / max|block|), dx = max|block| / 127 (0 for a zero block); rows [t0, t1).
// The same values as affine_matvec.cpp's portable loop, 16 lanes at a time.
void quantize_blocks_avx512(const float* x, int64_t cols, int64_t t0, int64_t t1, int8_t* xq,
                            float* xdx);

namespace {

template <ParamType P>
inline float param(const void* p, int64_t i) {
  if constexpr (P == ParamType::F32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (P == ParamType::BF16) {
    const uint32_t bits = uint32_t(static_cast<const uint16_t*>(p)[i]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  } else {
    return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);
  }
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Parameters i..i+7 as floats.
template <ParamType P>
inline __m256 param8(const void* p, int64_t i) {
  if constexpr (P == ParamType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (P == ParamType::BF16)
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    else
      return _mm256_cvtph_ps(h);
  }
}

// Adds the biases' share Σ_g b_g·Σx_g of every input row to its accumulator (a row's biases
// are read once for all NT input rows); groups past the last multiple of 8 go to `tail`.
template <ParamType P, int NT>
inline void add_bias_terms(const Args& a, int64_t r, __m256 (&acc)[NT], float (&tail)[NT]) {
  const int64_t groups = a.cols / a.group, first = r * groups;
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    const __m256 b = param8<P>(a.biases, first + g);
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm256_fmadd_ps(b, _mm256_loadu_ps(a.gsum + t * groups + g), acc[t]);
  }
  for (int t = 0; t < NT; ++t) tail[t] = 0;
  for (; g < groups; ++g) {
    const float b = param<P>(a.biases, first + g);
    for (int t = 0; t < NT; ++t) tail[t] += b * a.gsum[t * groups + g];
  }
}

template <class Ops, ParamType P, int NT>
void rows4(const Args& a, int64_t r0, int64_t r1) {
  const int64_t pairs = a.cols / 64, groups = a.cols / a.group, row_bytes = a.cols / 2;
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* codes = a.codes + r * row_bytes;
    const int64_t s0 = r * groups;
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
      const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + p * 32));
      const __m256i lo = _mm256_and_si256(c, low);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low);
      // Block A's scale in lanes 0-3, B's in 4-7 (one group when groups are 64 or wider).
      const __m256 sv = a.group >= 64
                            ? _mm256_set1_ps(param<P>(a.scales, s0 + p * 64 / a.group))
                            : _mm256_set_m128(_mm_set1_ps(param<P>(a.scales, s0 + 2 * p + 1)),
                                              _mm_set1_ps(param<P>(a.scales, s0 + 2 * p)));
      for (int t = 0; t < NT; ++t) {
        const int8_t* xq = a.xq + t * a.cols + p * 64;
        const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
        const __m256i xo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
        const __m256i d = Ops::dot(Ops::dot(_mm256_setzero_si256(), lo, xe), hi, xo);
        const __m256 dx = _mm256_loadu_ps(a.xdx + (t * pairs + p) * 8);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_mul_ps(dx, sv), acc[t]);
      }
    }
    float tail[NT];
    add_bias_terms<P, NT>(a, r, acc, tail);
    for (int t = 0; t < NT; ++t) a.y[t * a.rows + r] = hsum(acc[t]) + tail[t];
  }
}

template <class Ops, int NT>
void rows_tile(const Args& a, int64_t r0, int64_t r1) {
  switch (a.param_type) {
    case ParamType::F32:
      return rows4<Ops, ParamType::F32, NT>(a, r0, r1);
    case ParamType::BF16:
      return rows4<Ops, ParamType::BF16, NT>(a, r0, r1);
    default:
      return rows4<Ops, ParamType::F16, NT>(a, r0, r1);
  }
}

// Up to 8 input rows per pass over W: every code byte is read once per 8 input rows.
template <class Ops>
void rows(const Args& a, int64_t r0, int64_t r1) {
  for (int64_t t0 = 0; t0 < a.n; t0 += 8) {
    Args part = a;
    part.xq = a.xq + t0 * a.cols;
    part.xdx = a.xdx + t0 * (a.cols / 64 * 8);
    part.gsum = a.gsum + t0 * (a.cols / a.group);
    part.y = a.y + t0 * a.rows;
    switch (a.n - t0 < 8 ? a.n - t0 : 8) {
      case 1:
        rows_tile<Ops, 1>(part, r0, r1);
        break;
      case 2:
        rows_tile<Ops, 2>(part, r0, r1);
        break;
      case 3:
        rows_tile<Ops, 3>(part, r0, r1);
        break;
      case 4:
        rows_tile<Ops, 4>(part, r0, r1);
        break;
      case 5:
        rows_tile<Ops, 5>(part, r0, r1);
        break;
      case 6:
        rows_tile<Ops, 6>(part, r0, r1);
        break;
      case 7:
        rows_tile<Ops, 7>(part, r0, r1);
        break;
      default:
        rows_tile<Ops, 8>(part, r0, r1);
    }
  }
}

}  // namespace
}  // namespace hearth::cpu::affine_int8
