// The int8-activation affine product for many input rows (prefill) on AVX512-VNNI, 512-bit
// vectors: a vector lane is a weight row. Each tile of 32 output rows is first repacked so that
// 64 bytes hold 4 codes (as bytes) of each of 16 rows, with the rows' scales and biases as f32
// vectors; then 4 input rows at a time, every 4 inputs' activation bytes are broadcast and
// multiplied into the 16 rows' int32 sums by one vpdpbusd, and after each 32-input block the
// sums become floats scaled by the rows' scales times the block's dx. The result is 16 rows of
// output per vector, stored without a horizontal sum. (The decode kernels, one weight row per
// vector, are in affine_int8_kernels.h.)
#if !defined(__clang__)
// GCC 12's intrinsic headers use self-initialised "undefined" vectors that trip these warnings
// once inlined (a known header bug); the code is fine.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

// Every function below is compiled for these features (the dispatcher checks them first); the
// headers above stay baseline.
#if defined(__clang__)
#pragma clang attribute push(                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"))), \
    apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#endif

#include "backend/cpu/affine_int8_kernels.h"

namespace hearth::cpu::affine_int8 {
namespace {

constexpr int kLanes = 16;                    // weight rows per vector
constexpr int kVectors = 2;                   // vectors of rows per tile
constexpr int kTileRows = kLanes * kVectors;  // 32
constexpr int kInputs = 4;                    // input rows per pass over a tile

// A repacked tile: codes [kVectors][cols/4][16 lanes][4 bytes]; scales and biases
// [kVectors][groups][16] f32. Rows past the matrix are zeros.
struct Tile {
  uint8_t* codes;
  float* scales;
  float* biases;
};

template <ParamType P>
void repack(const Args& a, int64_t r0, const Tile& tile) {
  const int64_t steps = a.cols / 4, groups = a.cols / a.group, row_bytes = a.cols / 2;
  for (int v = 0; v < kVectors; ++v)
    for (int lane = 0; lane < kLanes; ++lane) {
      const int64_t r = r0 + v * kLanes + lane;
      uint8_t* dst = tile.codes + v * steps * 64 + lane * 4;
      float* sd = tile.scales + v * groups * kLanes + lane;
      float* bd = tile.biases + v * groups * kLanes + lane;
      if (r >= a.rows) {
        for (int64_t j = 0; j < steps; ++j) std::memset(dst + j * 64, 0, 4);
        for (int64_t g = 0; g < groups; ++g) sd[g * kLanes] = bd[g * kLanes] = 0.0f;
        continue;
      }
      const uint8_t* src = a.codes + r * row_bytes;
      for (int64_t j = 0; j < steps; ++j) {  // codes 4j..4j+3: bytes 2j, 2j+1, low nibble first
        uint8_t* d = dst + j * 64;
        d[0] = src[2 * j] & 15;
        d[1] = src[2 * j] >> 4;
        d[2] = src[2 * j + 1] & 15;
        d[3] = src[2 * j + 1] >> 4;
      }
      for (int64_t g = 0; g < groups; ++g) {
        sd[g * kLanes] = param<P>(a.scales, r * groups + g);
        bd[g * kLanes] = param<P>(a.biases, r * groups + g);
      }
    }
}

// y[t0 .. t0 + T, r0 .. r0 + 32) from a repacked tile.
template <int T>
void tile_product(const Args& a, const Tile& tile, int64_t r0, int64_t t0) {
  const int64_t steps = a.cols / 4, blocks = a.cols / 32, groups = a.cols / a.group;
  __m512 acc[kVectors][T];
  for (int v = 0; v < kVectors; ++v)
    for (int t = 0; t < T; ++t) acc[v][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512i isum[kVectors][T];
    for (int v = 0; v < kVectors; ++v)
      for (int t = 0; t < T; ++t) isum[v][t] = _mm512_setzero_si512();
    for (int64_t j = b * 8; j < b * 8 + 8; ++j) {
      __m512i w[kVectors];
      for (int v = 0; v < kVectors; ++v)
        w[v] = _mm512_loadu_si512(tile.codes + (v * steps + j) * 64);
      for (int t = 0; t < T; ++t) {
        int32_t x4;
        std::memcpy(&x4, a.xq + (t0 + t) * a.cols + j * 4, 4);
        const __m512i xb = _mm512_set1_epi32(x4);
        for (int v = 0; v < kVectors; ++v) isum[v][t] = _mm512_dpbusd_epi32(isum[v][t], w[v], xb);
      }
    }
    const int64_t g = b * 32 / a.group;
    __m512 s[kVectors];
    for (int v = 0; v < kVectors; ++v)
      s[v] = _mm512_loadu_ps(tile.scales + (v * groups + g) * kLanes);
    for (int t = 0; t < T; ++t) {
      const __m512 dx = _mm512_set1_ps(a.xdx[(t0 + t) * blocks + b]);
      for (int v = 0; v < kVectors; ++v)
        acc[v][t] =
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[v][t]), _mm512_mul_ps(s[v], dx), acc[v][t]);
    }
  }
  for (int64_t g = 0; g < groups; ++g)
    for (int v = 0; v < kVectors; ++v) {
      const __m512 bias = _mm512_loadu_ps(tile.biases + (v * groups + g) * kLanes);
      for (int t = 0; t < T; ++t)
        acc[v][t] = _mm512_fmadd_ps(bias, _mm512_set1_ps(a.gsum[(t0 + t) * groups + g]), acc[v][t]);
    }
  for (int v = 0; v < kVectors; ++v) {
    const int64_t first = r0 + v * kLanes, valid = a.rows - first;
    if (valid <= 0) break;
    const __mmask16 mask = valid >= kLanes ? __mmask16(0xFFFF) : __mmask16((1u << valid) - 1);
    for (int t = 0; t < T; ++t)
      _mm512_mask_storeu_ps(a.y + (t0 + t) * a.rows + first, mask, acc[v][t]);
  }
}

template <ParamType P>
void gemm_typed(const Args& a, int64_t r0, int64_t r1) {
  const int64_t groups = a.cols / a.group;
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<float> params;
  codes.resize(size_t(kTileRows * a.cols));
  params.resize(size_t(2 * kTileRows * groups));
  const Tile tile{codes.data(), params.data(), params.data() + kTileRows * groups};
  for (int64_t r = r0; r < r1; r += kTileRows) {
    repack<P>(a, r, tile);
    int64_t t = 0;
    for (; t + kInputs <= a.n; t += kInputs) tile_product<kInputs>(a, tile, r, t);
    for (; t < a.n; ++t) tile_product<1>(a, tile, r, t);
  }
}

}  // namespace

void gemm_avx512vnni(const Args& a, int64_t begin, int64_t end) {
  switch (a.param_type) {
    case ParamType::F32:
      return gemm_typed<ParamType::F32>(a, begin, end);
    case ParamType::BF16:
      return gemm_typed<ParamType::BF16>(a, begin, end);
    default:
      return gemm_typed<ParamType::F16>(a, begin, end);
  }
}

void quantize_blocks_avx512(const float* x, int64_t cols, int64_t t0, int64_t t1, int8_t* xq,
                            float* xdx) {
  const int64_t blocks = cols / 32;
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t b = 0; b < blocks; ++b) {
      const float* xb = x + t * cols + b * 32;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f;
      const __m512 s = _mm512_set1_ps(inv);
      // cvtps2dq rounds to nearest even (the default rounding mode), as the portable loop does.
      int8_t* dst = xq + t * cols + b * 32;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst),
                       _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, s))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16),
                       _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, s))));
      xdx[t * blocks + b] = amax / 127.0f;
    }
}

}  // namespace hearth::cpu::affine_int8

#if defined(__clang__)
#pragma clang attribute pop
#endif
