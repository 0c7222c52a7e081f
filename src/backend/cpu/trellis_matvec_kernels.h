// Internal: the trellis matvec kernels (trellis_matvec.h) as templates over a small policy of
// vector ops (the window shift and the 1MAD byte sum), instantiated once per ISA file.
// A block's 256 weights are decoded as 8 lanes × 32: lane l holds the block's bit range
// [32k·l, 32k·(l+1)), i.e. symbols t = 255 - 32l - i for i = 0..31, so the window of every i
// sits at the same bit offset k·i in each lane's own k words (plus the next lane's first word,
// wrapping to word 0 for the last lane): every shift is a compile-time constant and one 8-wide
// op decodes 8 weights. x (axis 1) comes permuted into that lane order; the scatter (axis 0)
// accumulates in it and un-permutes its outputs.
// Include it after the file's `#pragma GCC target` and after every other header: the templates
// live in an anonymous namespace so each file's copy keeps its own ISA.
#pragma once
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "quant/trellis.h"

namespace hearth::cpu::trellis {

// xs: axis 1, x permuted [n, cols] in lane order; axis 0, the input coefficients
// x[j][r]·scale[r]/147.8 as [n, cols].
struct Args {
  const uint32_t* codes;
  const uint16_t* scales;
  int64_t rows, cols, n;
  const float* xs;
  float* y;
};

// One pair per ISA file: outputs [begin, end) of the gather (rows) or the scatter (blocks).
void gather_generic(const Args& a, int k, int64_t begin, int64_t end);
void scatter_generic(const Args& a, int k, int64_t begin, int64_t end);
void gather_avx2(const Args& a, int k, int64_t begin, int64_t end);
void scatter_avx2(const Args& a, int k, int64_t begin, int64_t end);
void gather_avx512(const Args& a, int k, int64_t begin, int64_t end);
void scatter_avx512(const Args& a, int k, int64_t begin, int64_t end);

namespace {

constexpr int kT = quant::TrellisSpec::kBlock;

typedef uint32_t V8u __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));
typedef float V8f __attribute__((vector_size(32)));

// The portable ops; ISA files may replace them with single instructions.
struct GenericOps {
  // The 32 bits starting at bit S of hi:lo.
  template <int S>
  static void window(const V8u& lo, const V8u& hi, V8u& v) {
    v = lo >> S;
    if constexpr (S > 32 - quant::TrellisSpec::kStateBits) v |= hi << (32 - S);
  }
  // quant::trellis_1mad_int of the LCG output z, as f32.
  static void byte_sum(const V8u& z, V8f& out) {
    const V8u p = (z & 0x00FF00FFu) + ((z >> 8) & 0x00FF00FFu);
    const V8i y = (V8i)((p & 0xFFFFu) + (p >> 16)) - 510;
    out = __builtin_convertvector(y, V8f);
  }
};

inline void load8(const float* p, V8f& v) { std::memcpy(&v, p, 32); }

// wt[m][l] = word m of lane l (m = K: the next lane's first word).
template <int K>
inline void lane_words(const uint32_t* __restrict w, V8u* wt) {
  for (int m = 0; m <= K; ++m) {
    uint32_t lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = w[(l * K + m) % (8 * K)];
    std::memcpy(&wt[m], lanes, 32);
  }
}

template <class Ops, int K, int I>
[[gnu::always_inline]] inline void decode_index(const V8u* wt, V8f* vals) {
  constexpr int q = K * I, m = q >> 5, s = q & 31;
  V8u v;
  Ops::template window<s>(wt[m], wt[m + 1], v);
  v &= uint32_t(quant::TrellisSpec::kStates - 1);
  Ops::byte_sum(v * 34038481u + 76625530u, vals[I]);
}

template <class Ops, int K, int... I>
[[gnu::always_inline]] inline void decode_all(const V8u* wt, V8f* vals,
                                              std::integer_sequence<int, I...>) {
  (decode_index<Ops, K, I>(wt, vals), ...);
}

// vals[i][l] = integer code value (unscaled) of symbol 255 - 32l - i of the block at w.
template <class Ops, int K>
[[gnu::always_inline]] inline void decode_block(const uint32_t* w, V8f* vals) {
  V8u wt[K + 1];
  lane_words<K>(w, wt);
  decode_all<Ops, K>(wt, vals, std::make_integer_sequence<int, 32>());
}

// acc[j] += vals · x_j over one block, for NJ input rows at once: each decoded vector is loaded
// once and feeds NJ register accumulators (two partial sums when NJ = 1, for FMA latency).
template <int NJ>
[[gnu::always_inline]] inline void dot_block(const V8f* vals, const float* x, int64_t stride,
                                             V8f* acc) {
  if constexpr (NJ == 1) {
    V8f s0 = {}, s1 = {}, x0, x1;
    for (int i = 0; i < 32; i += 2) {
      load8(x + i * 8, x0);
      load8(x + i * 8 + 8, x1);
      s0 += vals[i] * x0;
      s1 += vals[i + 1] * x1;
    }
    acc[0] += s0 + s1;
  } else {
    V8f s[NJ] = {};
    for (int i = 0; i < 32; ++i)
      for (int j = 0; j < NJ; ++j) {
        V8f xv;
        load8(x + j * stride + i * 8, xv);
        s[j] += vals[i] * xv;
      }
    for (int j = 0; j < NJ; ++j) acc[j] += s[j];
  }
}

// axis 1: outputs r0..r1, each a dot product over its row's blocks; the code's 1/147.8 and the
// row scale multiply the finished sum. Rows go in tiles of 4 so a block of x (8 KiB at n = 8)
// is read from L1 by the tile's other rows; input rows go 8, 4, 2, 1 at a time over one decode.
template <class Ops, int K>
void gather_rows(const Args& a, int64_t r0, int64_t r1) {
  constexpr int kWords = quant::TrellisSpec::block_words(K);
  constexpr int kTile = 4;
  const int64_t n_blocks = a.cols / kT, row_words = n_blocks * kWords;
  V8f vals[32];
  for (int64_t rt = r0; rt < r1; rt += kTile) {
    const int nr = r1 - rt < kTile ? int(r1 - rt) : kTile;
    for (int64_t j0 = 0; j0 < a.n; j0 += 8) {
      const int64_t nj = a.n - j0 < 8 ? a.n - j0 : 8;
      V8f acc[kTile][8] = {};
      for (int64_t b = 0; b < n_blocks; ++b) {
        const float* x = a.xs + j0 * a.cols + b * kT;
        for (int rr = 0; rr < nr; ++rr) {
          decode_block<Ops, K>(a.codes + (rt + rr) * row_words + b * kWords, vals);
          V8f* ar = acc[rr];
          int64_t j = 0;
          if (nj == 8) dot_block<8>(vals, x, a.cols, ar), j = 8;
          if (nj - j >= 4) dot_block<4>(vals, x + j * a.cols, a.cols, ar + j), j += 4;
          if (nj - j >= 2) dot_block<2>(vals, x + j * a.cols, a.cols, ar + j), j += 2;
          if (nj - j >= 1) dot_block<1>(vals, x + j * a.cols, a.cols, ar + j);
        }
      }
      for (int rr = 0; rr < nr; ++rr) {
        const float scale = f16_to_f32(a.scales[rt + rr]) / quant::kTrellis1madScale;
        for (int64_t j = 0; j < nj; ++j) {
          float sum = 0;
          for (int l = 0; l < 8; ++l) sum += acc[rr][j][l];
          a.y[(j0 + j) * a.rows + rt + rr] = sum * scale;
        }
      }
    }
  }
}

// axis 0: output blocks b0..b1 (256 outputs each); every code row adds coef · its block.
template <class Ops, int K>
void scatter_blocks(const Args& a, int64_t b0, int64_t b1) {
  constexpr int kWords = quant::TrellisSpec::block_words(K);
  const int64_t row_words = a.rows / kT * kWords;
  V8f vals[32];
  V8f acc[8][32];
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t j0 = 0; j0 < a.n; j0 += 8) {
      const int64_t nj = a.n - j0 < 8 ? a.n - j0 : 8;
      for (int64_t j = 0; j < nj; ++j)
        for (int i = 0; i < 32; ++i) acc[j][i] = V8f{};
      for (int64_t r = 0; r < a.cols; ++r) {
        float coef[8];
        bool any = false;
        for (int64_t j = 0; j < nj; ++j) {
          coef[j] = a.xs[(j0 + j) * a.cols + r];
          any |= coef[j] != 0.0f;
        }
        if (!any) continue;  // exact: a zero input adds nothing (sparse activations skip rows)
        decode_block<Ops, K>(a.codes + r * row_words + b * kWords, vals);
        for (int64_t j = 0; j < nj; ++j) {
          const float c = coef[j];
          for (int i = 0; i < 32; ++i) acc[j][i] += c * vals[i];
        }
      }
      for (int64_t j = 0; j < nj; ++j) {
        float* yj = a.y + (j0 + j) * a.rows + b * kT;
        for (int i = 0; i < 32; ++i)
          for (int l = 0; l < 8; ++l) yj[kT - 1 - 32 * l - i] = acc[j][i][l];
      }
    }
  }
}

template <class Ops>
void gather(const Args& a, int k, int64_t begin, int64_t end) {
  if (k == 2) gather_rows<Ops, 2>(a, begin, end);
  if (k == 3) gather_rows<Ops, 3>(a, begin, end);
  if (k == 4) gather_rows<Ops, 4>(a, begin, end);
}

template <class Ops>
void scatter(const Args& a, int k, int64_t begin, int64_t end) {
  if (k == 2) scatter_blocks<Ops, 2>(a, begin, end);
  if (k == 3) scatter_blocks<Ops, 3>(a, begin, end);
  if (k == 4) scatter_blocks<Ops, 4>(a, begin, end);
}

}  // namespace
}  // namespace hearth::cpu::trellis
