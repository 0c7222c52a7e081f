// Internal: the MLX-affine decode kernel (affine_matvec.h) as one template over a small policy
// (how 8 codes of `bits` bits spread to 8 bytes), compiled once per ISA file. It is written with
// GCC/clang vector extensions on 16-float vectors: one zmm op under AVX-512, two ymm ops under
// AVX2, four xmm ops on baseline x86-64.
// A row is read 32 codes at a time (4·bits bytes; a group holds 1-4 such chunks): the codes become
// two 16-float vectors, are dequantized in registers (scale · q + bias of their group, as the
// reference decoder computes them) and multiply-add into every input row's accumulators. 4-bit
// codes are split into low and high nibbles (codes 2i and 2i+1), so x comes with each 32-chunk
// permuted to [even | odd]; 8-bit codes are bytes; 2, 3, 5 and 6 bits spread 8 codes to 8 bytes
// with one bit deposit (BMI2 pdep in the ISA files).
// Include it after the file's `#pragma GCC target` and after every other header: the templates
// live in an anonymous namespace so each file's copy keeps its own ISA.
#pragma once
#include <cstdint>
#include <cstring>

namespace hearth::cpu::affine {

// codes [rows, cols·bits/32] words; scales, biases [rows, cols/group] as f32 (converted once per
// call); xs [n, cols], each 32-chunk permuted to [even | odd] for 4 bits; y [n, rows].
struct Args {
  const uint32_t* codes;
  const float* scales;
  const float* biases;
  int64_t rows, cols;
  int bits, group;
  int64_t n;
  const float* xs;
  float* y;
};

// One pair per ISA file: output rows [begin, end) of the product, and rows [begin, end) of W
// dequantized to out [end - begin, cols] (scales and biases indexed from row 0, xs and y unused).
void rows_generic(const Args& a, int64_t begin, int64_t end);
void rows_avx2(const Args& a, int64_t begin, int64_t end);
void rows_avx512(const Args& a, int64_t begin, int64_t end);
void dequantize_generic(const Args& a, int64_t begin, int64_t end, float* out);
void dequantize_avx2(const Args& a, int64_t begin, int64_t end, float* out);
void dequantize_avx512(const Args& a, int64_t begin, int64_t end, float* out);

namespace {

typedef float V16f __attribute__((vector_size(64)));
typedef uint8_t V16b __attribute__((vector_size(16)));

typedef int32_t V16i __attribute__((vector_size(64)));

// The portable ops. GCC scalarises a direct u8 -> f32 vector conversion (a byte extract and a
// scalar convert per lane), so bytes widen to i32 first; ISA files use vpmovzxbd instead.
struct GenericOps {
  static void to_float(const V16b& v, V16f& out) {
    out = __builtin_convertvector(__builtin_convertvector(v, V16i), V16f);
  }
  // Bits [Bits·j, Bits·(j+1)) of v to byte j, for j < 8.
  template <int Bits>
  static uint64_t spread8(uint64_t v) {
    uint64_t out = 0;
    for (int j = 0; j < 8; ++j) out |= ((v >> (Bits * j)) & ((1u << Bits) - 1)) << (8 * j);
    return out;
  }
};

// The byte mask that spreads Bits-bit fields to bytes with pdep.
template <int Bits>
constexpr uint64_t spread_mask() {
  uint64_t m = 0;
  for (int j = 0; j < 8; ++j) m |= uint64_t((1u << Bits) - 1) << (8 * j);
  return m;
}

// Codes 0..31 of the chunk at p as two 16-float vectors (for 4 bits: even codes, odd codes).
template <class Ops, int Bits>
[[gnu::always_inline]] inline void decode32(const uint8_t* p, V16f& q0, V16f& q1) {
  V16b lo, hi;
  if constexpr (Bits == 4) {
    V16b v;
    std::memcpy(&v, p, 16);
    lo = v & 15;
    hi = v >> 4;
  } else if constexpr (Bits == 8) {
    std::memcpy(&lo, p, 16);
    std::memcpy(&hi, p + 16, 16);
  } else {
    // 8 codes are Bits whole bytes; copy exactly those, never past the row.
    uint64_t part[4];
    for (int k = 0; k < 4; ++k) {
      uint64_t v = 0;
      std::memcpy(&v, p + k * Bits, Bits);
      part[k] = Ops::template spread8<Bits>(v);
    }
    std::memcpy(&lo, part, 16);
    std::memcpy(&hi, part + 2, 16);
  }
  Ops::to_float(lo, q0);
  Ops::to_float(hi, q1);
}

inline void load16(const float* p, V16f& v) { std::memcpy(&v, p, 64); }

inline float hsum(const V16f& v) {
  float s = 0;
  for (int l = 0; l < 16; ++l) s += v[l];
  return s;
}

// NT input rows at once: each dequantized vector is made once and feeds NT accumulator pairs.
template <class Ops, int Bits, int NT>
void rows_tile(const Args& a, int64_t r0, int64_t r1) {
  const int64_t groups = a.cols / a.group, row_bytes = a.cols * Bits / 8;
  const int chunks_per_group = a.group / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* codes = reinterpret_cast<const uint8_t*>(a.codes) + r * row_bytes;
    const float* scales = a.scales + r * groups;
    const float* biases = a.biases + r * groups;
    V16f acc0[NT] = {}, acc1[NT] = {};
    for (int64_t g = 0; g < groups; ++g) {
      const float s = scales[g], b = biases[g];
      for (int64_t c = g * chunks_per_group; c < (g + 1) * chunks_per_group; ++c) {
        V16f q0, q1;
        decode32<Ops, Bits>(codes + c * 4 * Bits, q0, q1);
        const V16f w0 = q0 * s + b, w1 = q1 * s + b;
        for (int t = 0; t < NT; ++t) {
          V16f x0, x1;
          load16(a.xs + t * a.cols + c * 32, x0);
          load16(a.xs + t * a.cols + c * 32 + 16, x1);
          acc0[t] += w0 * x0;
          acc1[t] += w1 * x1;
        }
      }
    }
    for (int t = 0; t < NT; ++t) a.y[t * a.rows + r] = hsum(acc0[t] + acc1[t]);
  }
}

// Up to 8 input rows in one pass over W, so each code is read once per call (16 accumulators
// under AVX-512; AVX2 spills some to L1, which costs less than reading W twice).
template <class Ops, int Bits>
void rows_bits(const Args& a, int64_t r0, int64_t r1) {
  for (int64_t t0 = 0; t0 < a.n; t0 += 8) {
    Args part = a;
    part.xs = a.xs + t0 * a.cols;
    part.y = a.y + t0 * a.rows;
    switch (a.n - t0 < 8 ? a.n - t0 : 8) {
      case 1:
        rows_tile<Ops, Bits, 1>(part, r0, r1);
        break;
      case 2:
        rows_tile<Ops, Bits, 2>(part, r0, r1);
        break;
      case 3:
        rows_tile<Ops, Bits, 3>(part, r0, r1);
        break;
      case 4:
        rows_tile<Ops, Bits, 4>(part, r0, r1);
        break;
      case 5:
        rows_tile<Ops, Bits, 5>(part, r0, r1);
        break;
      case 6:
        rows_tile<Ops, Bits, 6>(part, r0, r1);
        break;
      case 7:
        rows_tile<Ops, Bits, 7>(part, r0, r1);
        break;
      default:
        rows_tile<Ops, Bits, 8>(part, r0, r1);
    }
  }
}

// The prefill path's dequantization: the same decode, stored in natural order.
template <class Ops, int Bits>
void dequantize_bits(const Args& a, int64_t r0, int64_t r1, float* out) {
  const int64_t groups = a.cols / a.group, row_bytes = a.cols * Bits / 8;
  const int chunks_per_group = a.group / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* codes = reinterpret_cast<const uint8_t*>(a.codes) + r * row_bytes;
    float* dst = out + (r - r0) * a.cols;
    for (int64_t g = 0; g < groups; ++g) {
      const float s = a.scales[r * groups + g], b = a.biases[r * groups + g];
      for (int64_t c = g * chunks_per_group; c < (g + 1) * chunks_per_group; ++c) {
        V16f q0, q1;
        decode32<Ops, Bits>(codes + c * 4 * Bits, q0, q1);
        V16f w0 = q0 * s + b, w1 = q1 * s + b;
        if constexpr (Bits == 4) {  // even and odd codes back into order
          const V16f a0 = __builtin_shufflevector(w0, w1, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21,
                                                  6, 22, 7, 23);
          w1 = __builtin_shufflevector(w0, w1, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30,
                                       15, 31);
          w0 = a0;
        }
        std::memcpy(dst + c * 32, &w0, 64);
        std::memcpy(dst + c * 32 + 16, &w1, 64);
      }
    }
  }
}

template <class Ops>
void dequantize(const Args& a, int64_t r0, int64_t r1, float* out) {
  switch (a.bits) {
    case 2:
      return dequantize_bits<Ops, 2>(a, r0, r1, out);
    case 3:
      return dequantize_bits<Ops, 3>(a, r0, r1, out);
    case 4:
      return dequantize_bits<Ops, 4>(a, r0, r1, out);
    case 5:
      return dequantize_bits<Ops, 5>(a, r0, r1, out);
    case 6:
      return dequantize_bits<Ops, 6>(a, r0, r1, out);
    default:
      return dequantize_bits<Ops, 8>(a, r0, r1, out);
  }
}

template <class Ops>
void rows(const Args& a, int64_t r0, int64_t r1) {
  switch (a.bits) {
    case 2:
      return rows_bits<Ops, 2>(a, r0, r1);
    case 3:
      return rows_bits<Ops, 3>(a, r0, r1);
    case 4:
      return rows_bits<Ops, 4>(a, r0, r1);
    case 5:
      return rows_bits<Ops, 5>(a, r0, r1);
    case 6:
      return rows_bits<Ops, 6>(a, r0, r1);
    default:
      return rows_bits<Ops, 8>(a, r0, r1);
  }
}

}  // namespace
}  // namespace hearth::cpu::affine
