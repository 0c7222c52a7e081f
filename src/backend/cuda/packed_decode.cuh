// Device-side reading of packed weights (PackedTen: MLX affine, trellis 1MAD), shared by the
// decode products (packed_gemv.cu) and the dequantizers (packed_dequant.cu). The formats are
// described in src/quant/affine.h and src/quant/trellis.h; these functions compute the same
// values as their reference decoders.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

constexpr int kTrellisBlock = 256;                      // weights per trellis block (T)
constexpr float kTrellis1madScale = 147.800537109375f;  // the code's standard deviation

// PackedTen::transposed() for device code: a trellis weight stored as Wᵀ.
__device__ __forceinline__ bool stored_transposed(const PackedTen& w) {
  return w.format == kPackedTrellis && w.axis == 0;
}

// 256 + q as an f32, for an integer q < 256, in one integer op: q lands in the mantissa of 256.0
// (whose unit in the last place is 2^-15), so the conversion needs no int-to-float instruction.
// Callers subtract the 256 once per sum (256 · Σx) instead of once per weight.
__device__ __forceinline__ float f32_256_plus(uint32_t q) {
  return __uint_as_float(0x43800000u | (q << 15));
}

// The 1MAD code's integer y ∈ [−510, 510] as an exact f32, for a 12-bit trellis state: an LCG
// step, the sum of its four bytes (one dp4a against 0x01010101), and the sum placed in the
// mantissa of 1024.0 (unit 2^-13), minus 1024 + 510. Bit-identical to trellis_1mad_int.
// trellis_1mad_biased is the same before the subtraction (1024 + y + 510), for sums that take
// it once (1534 · Σx) instead of once per weight.
__device__ __forceinline__ float trellis_1mad_biased(uint32_t state) {
  const uint32_t z = state * 34038481u + 76625530u;
  return __uint_as_float(0x44800000u | (__dp4a(z, 0x01010101u, 0u) << 13));
}
__device__ __forceinline__ float trellis_1mad(uint32_t state) {
  return trellis_1mad_biased(state) - 1534.0f;
}

// The 12-bit state of symbol t of a trellis block (8k words at `block`): the window starting at
// bit (255 − t)·k read upward, wrapping to the block's first word.
__device__ __forceinline__ uint32_t trellis_state_k(const uint32_t* block, int k, int t) {
  const int words = kTrellisBlock * k / 32;
  const int bit = (kTrellisBlock - 1 - t) * k;
  const int w = bit >> 5;
  const uint32_t lo = block[w], hi = block[w + 1 == words ? 0 : w + 1];
  return __funnelshift_r(lo, hi, uint32_t(bit)) & 0xFFFu;
}

// Code i of an affine row's little-endian bit stream (any bits ≤ 8, run-time).
__device__ __forceinline__ uint32_t affine_code_at(const uint32_t* row, int64_t i, int bits) {
  const int64_t bit = i * bits;
  const int64_t w = bit >> 5;
  const uint32_t sh = uint32_t(bit & 31);
  const uint32_t lo = row[w];
  const uint32_t hi = sh + uint32_t(bits) > 32 ? row[w + 1] : 0u;
  return __funnelshift_r(lo, hi, sh) & ((1u << bits) - 1u);
}

// Element (o, i) of the logical W [out, in] of any packed weight, in f32: the slow general path
// (embedding rows of a transposed table, tests); the kernels below decode in bulk.
__device__ __forceinline__ float packed_value(const PackedTen& w, int64_t o, int64_t i) {
  if (w.format == kPackedAffine) {
    const int64_t words = w.in * w.bits / 32, groups = w.in / w.group;
    const uint32_t q = affine_code_at(w.codes + o * words, i, w.bits);
    const int64_t g = o * groups + i / w.group;
    return ld(w.scales, w.param_dt, g) * float(q) + ld(w.biases, w.param_dt, g);
  }
  // Trellis: stored row r, coded position c.
  const int64_t r = w.axis == 1 ? o : i, c = w.axis == 1 ? i : o;
  const int64_t cols = w.axis == 1 ? w.in : w.out;
  const int64_t block_words = kTrellisBlock * w.bits / 32;
  const uint32_t* block = w.codes + (r * (cols / kTrellisBlock) + c / kTrellisBlock) * block_words;
  const uint32_t state = trellis_state_k(block, w.bits, int(c % kTrellisBlock));
  return trellis_1mad(state) / kTrellis1madScale * ld(w.scales, kF16, r);
}

}  // namespace hearth::cuda
