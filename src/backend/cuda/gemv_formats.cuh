// The weight formats the decode GEMV (gemv_kernel.cuh) reads: what a lane loads per unit and
// how it turns the unit into products with the input rows. The kernel's header lists the
// members a format provides.
#pragma once
#include "backend/cuda/gemv_kernel.cuh"
#include "backend/cuda/packed_decode.cuh"

namespace hearth::cuda::gemv {

// bf16 rows [out, in]: a unit is one 16-byte word, 8 weights.
struct Bf16Rows {
  static constexpr int kWeights = 8;
  static constexpr int kAlign = 1;
  static constexpr bool kExactRows = true;
  using Word = uint4;

  __device__ static Word load(const Mat& m, const Args& a, int64_t row, int64_t unit, int) {
    return ld_stream(static_cast<const uint4*>(m.w) + row * a.in8 + unit);
  }
  __device__ static Word none() { return make_uint4(0, 0, 0, 0); }
  static constexpr bool kStaged = false;
  static constexpr bool kSumsX = false;
  __device__ static int64_t x_slot(int64_t i, int64_t) { return i; }
  template <int N, bool STAGED>
  __device__ static void accumulate(const Word& w, const Args& a, int, int, const uint4* x,
                                    int64_t unit, float (&acc)[N]) {
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] += dot8(w, x[r * a.in8 + unit]);
  }
  template <bool STAGED>
  __device__ static float finish(float acc, float) {
    return acc;
  }
  __device__ static float row_scale(const Mat&, int64_t) { return 1.0f; }
};

// MLX affine codes of BITS bits, little-endian in uint32 words, a scale and a bias per group of
// a.group ≥ 32 weights: a unit is a 32-code chunk (BITS words, one group's) with its group's
// parameters. A code becomes the f32 256 + q in one integer op (f32_256_plus), and the weight
// s·q + b is then one FMA with the bias b − 256·s.
//
// A lane's chunk needs x words 4c..4c+3, so in x's own order the warp's loads of them are 64
// bytes apart (a quarter of each line used per load, which made these products bound by L1).
// Staged x is laid out so that each of the four loads is contiguous across the warp: within a
// span of 32 chunks (the last span may be shorter), word q of chunk c goes to q·span + c.
template <int BITS>
struct AffineRows {
  static constexpr int kWeights = 32;
  static constexpr int kAlign = 1;
  static constexpr bool kExactRows = false;
  struct Word {
    uint32_t q[BITS];
    float s, b;
  };

  __device__ static Word load(const Mat& m, const Args& a, int64_t row, int64_t unit, int) {
    Word w;
    const int64_t in = a.in8 * 8;
    load_chunk<BITS>(static_cast<const uint32_t*>(m.w) + row * (in * BITS / 32) + unit * BITS, w.q);
    const int64_t g = row * (in / a.group) + unit * 32 / a.group;
    w.s = ld(m.scales, a.param_dt, g);
    w.b = ld(m.biases, a.param_dt, g);
    return w;
  }
  __device__ static Word none() {
    Word w;
#pragma unroll
    for (int i = 0; i < BITS; ++i) w.q[i] = 0;
    w.s = w.b = 0.0f;
    return w;
  }
  static constexpr bool kStaged = true;
  static constexpr bool kSumsX = false;
  // Chunk c's span: its first word and the distance between its four words.
  __device__ static void span_of(int64_t c, int64_t in8, int64_t& first, int64_t& stride) {
    const int64_t chunks = in8 / 4, m = c >> 5;
    stride = min(int64_t(32), chunks - 32 * m);
    first = 128 * m + (c - 32 * m);
  }
  __device__ static int64_t x_slot(int64_t i, int64_t in8) {
    int64_t first, stride;
    span_of(i >> 2, in8, first, stride);
    return first + (i & 3) * stride;
  }
  template <int N, bool STAGED>
  __device__ static void accumulate(const Word& w, const Args& a, int n, int, const uint4* xb,
                                    int64_t c, float (&acc)[N]) {
    int64_t first = 4 * c, stride = 1;
    if constexpr (STAGED) span_of(c, a.in8, first, stride);
    const uint4* x = xb + first;
    const float b = w.b - 256.0f * w.s;
    // Eight weights at a time (one 16-byte word of each input row), so that few are live.
#pragma unroll
    for (int q8 = 0; q8 < 4; ++q8) {
      float v[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        v[j] = fmaf(f32_256_plus(chunk_code<BITS>(w.q, q8 * 8 + j)), w.s, b);
#pragma unroll
      for (int r = 0; r < N; ++r) {
        if (r >= n) break;
        float xv[8];
        bf16x8_to_f32(x[r * a.in8 + q8 * stride], xv);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) s = fmaf(v[j], xv[j], s);
        acc[r] += s;
      }
    }
  }
  template <bool STAGED>
  __device__ static float finish(float acc, float) {
    return acc;
  }
  __device__ static float row_scale(const Mat&, int64_t) { return 1.0f; }
};

// Trellis codes of K bits coded along the rows (axis 1): a 256-weight block is 8K words, decoded
// by a whole warp: lane l loads word l (lanes ≥ 8K none) and takes symbols 8l..8l+7 (unit
// block·32 + l), the two words its windows span coming by shuffle. The row's fp16 scale and the
// code's 1/147.8 multiply the finished sum. From staged x (whose Σx is known) the values are
// taken with their offset of 1534 (trellis_1mad_biased: one float op fewer per weight), and
// 1534·Σx comes off the row's sum once.
template <int K>
struct TrellisRows {
  static constexpr int kWeights = 8;
  static constexpr int kAlign = 32;
  static constexpr bool kExactRows = false;
  using Word = uint32_t;
  static constexpr int kWords = kTrellisBlock * K / 32;

  __device__ static Word load(const Mat& m, const Args& a, int64_t row, int64_t unit, int lane) {
    const int64_t blocks = a.in8 * 8 / kTrellisBlock;
    const uint32_t* block = static_cast<const uint32_t*>(m.w) + (row * blocks + unit / 32) * kWords;
    return lane < kWords ? ld_stream_u32(block + lane) : 0u;
  }
  __device__ static Word none() { return 0u; }
  static constexpr bool kStaged = true;
  static constexpr bool kSumsX = true;
  __device__ static int64_t x_slot(int64_t i, int64_t) { return i; }
  template <int N, bool STAGED>
  __device__ static void accumulate(const Word& w, const Args& a, int n, int lane, const uint4* x,
                                    int64_t unit, float (&acc)[N]) {
    float v[8];
    trellis_lane_values<K, STAGED>(w, lane, v);
#pragma unroll
    for (int r = 0; r < N; ++r) {
      if (r >= n) break;
      float xv[8];
      bf16x8_to_f32(x[r * a.in8 + unit], xv);
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) s = fmaf(v[j], xv[j], s);
      acc[r] += s;
    }
  }
  template <bool STAGED>
  __device__ static float finish(float acc, float xsum) {
    return STAGED ? fmaf(-1534.0f, xsum, acc) : acc;
  }
  __device__ static float row_scale(const Mat& m, int64_t row) {
    return ld(m.scales, kF16, row) / kTrellis1madScale;
  }
};

}  // namespace hearth::cuda::gemv
