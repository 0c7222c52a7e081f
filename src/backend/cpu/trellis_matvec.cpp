// Trellis matvec kernels. A block's 256 weights are decoded as 8 lanes × 32: lane l holds the
// block's bit range [32k·l, 32k·(l+1)), i.e. symbols t = 255 - 32l - i for i = 0..31, so the
// window of every i sits at the same bit offset k·i in each lane's own k words (plus the next
// lane's first word, wrapping to word 0 for the last lane): every shift is a compile-time
// constant and one 8-wide vector op decodes 8 weights. x (axis 1) is permuted once per call into
// that lane order; the scatter (axis 0) accumulates in it and un-permutes the outputs.
// The 1/147.8 of the code and the row scale are applied once per dot product (axis 1) or folded
// into the input coefficient (axis 0), not per weight.
// Written with GCC/clang vector extensions and compiled for baseline x86-64, AVX2 and AVX-512
// (VL, 32 registers); the family is picked once from CPUID like matmul's.
#include "backend/cpu/trellis_matvec.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/trellis.h"

namespace hearth::cpu {

namespace {

using Spec = quant::TrellisSpec;
constexpr int kT = Spec::kBlock;

typedef uint32_t V8u __attribute__((vector_size(32)));
typedef int32_t V8i __attribute__((vector_size(32)));
typedef float V8f __attribute__((vector_size(32)));

// Everything a kernel needs. xs: axis 1, x permuted [n, cols] in lane order; axis 0, the input
// coefficients x[j][r]·scale[r]/147.8 as [n, cols].
struct Args {
  const uint32_t* codes;
  const uint16_t* scales;
  int64_t rows, cols, n;
  const float* xs;
  float* y;
};

[[gnu::always_inline]] inline void load8(const float* p, V8f& v) { std::memcpy(&v, p, 32); }

// wt[m][l] = word m of lane l (m = K: the next lane's first word).
template <int K>
[[gnu::always_inline]] inline void lane_words(const uint32_t* __restrict w, V8u* wt) {
  for (int m = 0; m <= K; ++m) {
    uint32_t lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = w[(l * K + m) % (8 * K)];
    std::memcpy(&wt[m], lanes, 32);
  }
}

template <int K, int I>
[[gnu::always_inline]] inline void decode_index(const V8u* wt, V8f* vals) {
  constexpr int q = K * I, m = q >> 5, s = q & 31;
  V8u v = wt[m] >> s;
  if constexpr (s + Spec::kStateBits > 32) v |= wt[m + 1] << (32 - s);
  v &= uint32_t(Spec::kStates - 1);
  // quant::trellis_1mad_int, 8 lanes at a time.
  const V8u z = v * 34038481u + 76625530u;
  const V8u p = (z & 0x00FF00FFu) + ((z >> 8) & 0x00FF00FFu);
  const V8i y = (V8i)((p & 0xFFFFu) + (p >> 16)) - 510;
  vals[I] = __builtin_convertvector(y, V8f);
}

template <int K, int... I>
[[gnu::always_inline]] inline void decode_all(const V8u* wt, V8f* vals,
                                              std::integer_sequence<int, I...>) {
  (decode_index<K, I>(wt, vals), ...);
}

// vals[i][l] = integer code value (unscaled) of symbol 255 - 32l - i of the block at w.
template <int K>
[[gnu::always_inline]] inline void decode_block(const uint32_t* w, V8f* vals) {
  V8u wt[K + 1];
  lane_words<K>(w, wt);
  decode_all<K>(wt, vals, std::make_integer_sequence<int, 32>());
}

// axis 1: outputs r0..r1, each a dot product over its row's blocks.
template <int K>
[[gnu::always_inline]] inline void gather_rows(const Args& a, int64_t r0, int64_t r1) {
  constexpr int kWords = Spec::block_words(K);
  const int64_t n_blocks = a.cols / kT;
  V8f vals[32];
  for (int64_t r = r0; r < r1; ++r) {
    const uint32_t* row = a.codes + r * n_blocks * kWords;
    for (int64_t j0 = 0; j0 < a.n; j0 += 8) {
      const int64_t nj = std::min<int64_t>(8, a.n - j0);
      V8f acc[8] = {};
      for (int64_t b = 0; b < n_blocks; ++b) {
        decode_block<K>(row + b * kWords, vals);
        for (int64_t j = 0; j < nj; ++j) {
          const float* xj = a.xs + (j0 + j) * a.cols + b * kT;
          V8f s0 = {}, s1 = {}, xv0, xv1;
          for (int i = 0; i < 32; i += 2) {
            load8(xj + i * 8, xv0);
            load8(xj + i * 8 + 8, xv1);
            s0 += vals[i] * xv0;
            s1 += vals[i + 1] * xv1;
          }
          acc[j] += s0 + s1;
        }
      }
      const float scale = f16_to_f32(a.scales[r]) / quant::kTrellis1madScale;
      for (int64_t j = 0; j < nj; ++j) {
        float sum = 0;
        for (int l = 0; l < 8; ++l) sum += acc[j][l];
        a.y[(j0 + j) * a.rows + r] = sum * scale;
      }
    }
  }
}

// axis 0: output blocks b0..b1 (256 outputs each); every code row adds coef · its block.
template <int K>
[[gnu::always_inline]] inline void scatter_blocks(const Args& a, int64_t b0, int64_t b1) {
  constexpr int kWords = Spec::block_words(K);
  const int64_t row_words = a.rows / kT * kWords;
  V8f vals[32];
  V8f acc[8][32];
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t j0 = 0; j0 < a.n; j0 += 8) {
      const int64_t nj = std::min<int64_t>(8, a.n - j0);
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
        decode_block<K>(a.codes + r * row_words + b * kWords, vals);
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

using RangeFn = void (*)(const Args&, int64_t, int64_t);

#define HEARTH_TRELLIS_KERNELS(suffix, attrs)                                                    \
  attrs void gather2_##suffix(const Args& a, int64_t b, int64_t e) { gather_rows<2>(a, b, e); }  \
  attrs void gather3_##suffix(const Args& a, int64_t b, int64_t e) { gather_rows<3>(a, b, e); }  \
  attrs void gather4_##suffix(const Args& a, int64_t b, int64_t e) { gather_rows<4>(a, b, e); }  \
  attrs void scatter2_##suffix(const Args& a, int64_t b, int64_t e) {                            \
    scatter_blocks<2>(a, b, e);                                                                  \
  }                                                                                              \
  attrs void scatter3_##suffix(const Args& a, int64_t b, int64_t e) {                            \
    scatter_blocks<3>(a, b, e);                                                                  \
  }                                                                                              \
  attrs void scatter4_##suffix(const Args& a, int64_t b, int64_t e) {                            \
    scatter_blocks<4>(a, b, e);                                                                  \
  }                                                                                              \
  constexpr RangeFn kGather_##suffix[] = {gather2_##suffix, gather3_##suffix, gather4_##suffix}; \
  constexpr RangeFn kScatter_##suffix[] = {scatter2_##suffix, scatter3_##suffix, scatter4_##suffix};

HEARTH_TRELLIS_KERNELS(generic, )
#if defined(__x86_64__)
HEARTH_TRELLIS_KERNELS(avx2, [[gnu::target("avx2,fma")]])
HEARTH_TRELLIS_KERNELS(avx512, [[gnu::target("avx512f,avx512bw,avx512vl,fma")]])
#endif

enum class Family { Generic, Avx2, Avx512 };

Family family() {
  static const Family f = [] {
    using detail::MatmulIsa;
    if (detail::matmul_isa_supported(MatmulIsa::Avx512)) return Family::Avx512;
    if (detail::matmul_isa_supported(MatmulIsa::Avx2)) return Family::Avx2;
    return Family::Generic;
  }();
  return f;
}

RangeFn pick(int k, int axis) {
  const int i = k - Spec::kMinBits;
#if defined(__x86_64__)
  if (family() == Family::Avx512) return axis == 1 ? kGather_avx512[i] : kScatter_avx512[i];
  if (family() == Family::Avx2) return axis == 1 ? kGather_avx2[i] : kScatter_avx2[i];
#endif
  return axis == 1 ? kGather_generic[i] : kScatter_generic[i];
}

}  // namespace

std::string trellis_matvec_isa() {
  switch (family()) {
    case Family::Avx512:
      return "avx512";
    case Family::Avx2:
      return "avx2";
    default:
      return "generic";
  }
}

void trellis_matvec(const uint32_t* codes, const uint16_t* scales_f16, int64_t rows, int64_t cols,
                    int k, int axis, const float* x, int64_t n, float* y, ThreadPool& pool) {
  quant::trellis_check_bits(k, "trellis_matvec");
  if (axis != 0 && axis != 1) fail("trellis_matvec: axis must be 0 or 1, got {}", axis);
  const int64_t coded = axis == 1 ? cols : rows;  // the dimension blocks run along
  if (rows <= 0 || cols <= 0 || coded % kT != 0)
    fail("trellis_matvec: W [{}, {}] with axis {} needs its {} dim a multiple of {}", rows, cols,
         axis, axis == 1 ? "input" : "output", kT);
  if (n <= 0) return;

  // Per calling thread, grown once: the permuted x (axis 1) or the input coefficients (axis 0).
  thread_local std::vector<float> xs;
  if (xs.size() < size_t(n * cols)) xs.resize(size_t(n * cols));
  if (axis == 1) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t b = 0; b < cols / kT; ++b) {
        const float* src = x + j * cols + b * kT;
        float* dst = xs.data() + j * cols + b * kT;
        for (int i = 0; i < 32; ++i)
          for (int l = 0; l < 8; ++l) dst[i * 8 + l] = src[kT - 1 - 32 * l - i];
      }
  } else {
    for (int64_t r = 0; r < cols; ++r) {
      const float s = f16_to_f32(scales_f16[r]) / quant::kTrellis1madScale;
      for (int64_t j = 0; j < n; ++j) xs[size_t(j * cols + r)] = x[j * cols + r] * s;
    }
  }

  const Args args{codes, scales_f16, rows, cols, n, xs.data(), y};
  const RangeFn fn = pick(k, axis);
  if (axis == 1) {
    // ~32 KiB of codes per task at least, so small matrices stay on one thread.
    const int64_t grain = std::max<int64_t>(1, (32 << 10) / (cols * k / 8));
    pool.parallel_for(rows, grain, [&](int64_t b, int64_t e) { fn(args, b, e); });
  } else {
    pool.parallel_for(rows / kT, 1, [&](int64_t b, int64_t e) { fn(args, b, e); });
  }
}

}  // namespace hearth::cpu
