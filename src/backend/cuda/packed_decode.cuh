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

__device__ __forceinline__ uint32_t ld_stream_u32(const uint32_t* p) {
  uint32_t r;
  asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

__device__ __forceinline__ uint2 ld_stream_u64(const uint2* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// The `BITS` words of one 32-code affine chunk, with the widest loads its alignment allows (a
// chunk starts at a multiple of 4·BITS bytes).
template <int BITS>
__device__ __forceinline__ void load_chunk(const uint32_t* p, uint32_t (&w)[BITS]) {
  if constexpr (BITS % 4 == 0) {
#pragma unroll
    for (int i = 0; i < BITS / 4; ++i) {
      const uint4 v = ld_stream(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (BITS % 2 == 0) {
#pragma unroll
    for (int i = 0; i < BITS / 2; ++i) {
      const uint2 v = ld_stream_u64(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < BITS; ++i) w[i] = ld_stream_u32(p + i);
  }
}

// Code j of a chunk; j is a compile-time constant after unrolling, so are the shifts.
template <int BITS>
__device__ __forceinline__ uint32_t chunk_code(const uint32_t (&w)[BITS], int j) {
  const int bit = j * BITS, i = bit >> 5, sh = bit & 31;
  uint32_t v = w[i] >> sh;
  if (sh + BITS > 32) v |= w[i + 1] << (32 - sh);
  return v & ((1u << BITS) - 1u);
}

// The 1MAD values of lane l's symbols 8l..8l+7 of a block whose word `lane` is `word` (lanes
// ≥ 8k hold nothing). Symbol 8l+7 has the lowest bit offset; the lane's windows span at most
// 7k + 12 + 24 < 64 bits, so two words hold them all. kBiased: trellis_1mad_biased's values.
template <int K, bool kBiased = false>
__device__ __forceinline__ void trellis_lane_values(uint32_t word, int lane, float (&v)[8]) {
  constexpr int kWords = kTrellisBlock * K / 32;
  const int low = (kTrellisBlock - 8 - 8 * lane) * K;
  const int w0 = low >> 5;
  const uint32_t a = __shfl_sync(0xffffffffu, word, w0);
  const uint32_t b = __shfl_sync(0xffffffffu, word, w0 + 1 == kWords ? 0 : w0 + 1);
  const int base = low & 31;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int rel = base + (7 - j) * K;  // < 32 always for k = 2 and 4
    const uint32_t lo = (K == 3 && rel >= 32) ? b : a;
    const uint32_t state = __funnelshift_r(lo, b, uint32_t(rel)) & 0xFFFu;
    v[j] = kBiased ? trellis_1mad_biased(state) : trellis_1mad(state);
  }
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
