#include "backend/cpu/packed_matmul.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/trellis_matvec.h"
#include "core/error.h"
#include "quant/affine.h"
#include "quant/trellis.h"

namespace hearth::cpu {

namespace {

// Up to this many input rows read the codes directly; more go through dequantized blocks.
constexpr int64_t kDirectRows = 8;
// Output rows dequantized per block on the prefill path (f32 scratch of kBlockRows · in).
constexpr int64_t kBlockRows = 512;

// The codes of one group (a multiple of 32 bits, so it starts at a word) as floats.
template <int Bits>
inline void unpack_group(const uint32_t* words, int group, float* q) {
  constexpr uint32_t mask = (1u << Bits) - 1;
  if constexpr (32 % Bits == 0) {
    constexpr int per_word = 32 / Bits;
    for (int w = 0; w < group / per_word; ++w) {
      const uint32_t v = words[w];
      for (int j = 0; j < per_word; ++j) q[w * per_word + j] = float((v >> (j * Bits)) & mask);
    }
  } else {
    uint64_t window = 0;
    int have = 0, next = 0;
    for (int i = 0; i < group; ++i) {
      if (have < Bits) {
        window |= uint64_t(words[next++]) << have;
        have += 32;
      }
      q[i] = float(uint32_t(window) & mask);
      window >>= Bits;
      have -= Bits;
    }
  }
}

using UnpackFn = void (*)(const uint32_t*, int, float*);

UnpackFn unpack_for(int bits) {
  switch (bits) {
    case 2:
      return unpack_group<2>;
    case 3:
      return unpack_group<3>;
    case 4:
      return unpack_group<4>;
    case 5:
      return unpack_group<5>;
    case 6:
      return unpack_group<6>;
    case 8:
      return unpack_group<8>;
  }
  fail("affine bits {} is not supported", bits);
}

// Eight partial sums, so the compiler keeps them in vector lanes without reassociating.
__attribute__((target_clones("avx512f", "avx2", "default"))) float dot(const float* a,
                                                                       const float* b, int n) {
  float part[8] = {};
  for (int i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) part[j] += a[i + j] * b[i + j];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// y[t, r] for rows [r0, r1), t < n: per group, scale · (q · x) + bias · sum(x).
void affine_rows(const Tensor& w, const float* x, int64_t n, const float* xsum, float* y,
                 int64_t out, int64_t r0, int64_t r1) {
  const int64_t in = w.cols();
  const int bits = w.packed.bits, group = w.packed.group_size;
  const int64_t groups = in / group, words = quant::affine_words_per_row(in, bits);
  const size_t param_size = dtype_size(w.packed.param_dtype);
  const UnpackFn unpack = unpack_for(bits);
  std::vector<float> scales(static_cast<size_t>(groups)), biases(scales.size());
  std::vector<float> q(static_cast<size_t>(group)), acc(static_cast<size_t>(n));
  for (int64_t r = r0; r < r1; ++r) {
    const uint32_t* codes = w.as<const uint32_t>() + r * words;
    quant::affine_params_to_f32(static_cast<const char*>(w.packed.scales) + r * groups * param_size,
                                w.packed.param_dtype, groups, scales.data());
    quant::affine_params_to_f32(static_cast<const char*>(w.packed.biases) + r * groups * param_size,
                                w.packed.param_dtype, groups, biases.data());
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      unpack(codes + g * group * bits / 32, group, q.data());
      for (int64_t t = 0; t < n; ++t)
        acc[size_t(t)] += scales[size_t(g)] * dot(q.data(), x + t * in + g * group, group) +
                          biases[size_t(g)] * xsum[t * groups + g];
    }
    for (int64_t t = 0; t < n; ++t) y[t * out + r] = acc[size_t(t)];
  }
}

void affine_direct(const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool) {
  const int64_t n = x.rows(), in = w.cols(), out = w.rows();
  const int group = w.packed.group_size;
  const int64_t groups = in / group;
  // Sums of x over each group: the biases' share of every output.
  std::vector<float> xsum(static_cast<size_t>(n * groups));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      for (int i = 0; i < group; ++i) s += x.as<const float>()[t * in + g * group + i];
      xsum[size_t(t * groups + g)] = s;
    }
  pool.parallel_for(out, 16, [&](int64_t r0, int64_t r1) {
    affine_rows(w, x.as<const float>(), n, xsum.data(), y.as<float>(), out, r0, r1);
  });
}

void add_bias(const Tensor& y, const Tensor& bias, int64_t out) {
  if (bias.empty()) return;
  std::vector<float> b(static_cast<size_t>(out));
  load_f32(b.data(), bias.data, bias.dtype, out);
  for (int64_t t = 0; t < y.numel() / out; ++t)
    for (int64_t r = 0; r < out; ++r) y.as<float>()[t * out + r] += b[size_t(r)];
}

// Many input rows: dequantize kBlockRows output rows at a time and run the dense product.
void blocked(const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool) {
  const int64_t n = x.rows(), in = w.cols(), out = w.rows();
  const int64_t block = std::min(out, kBlockRows);
  std::vector<float> wb(static_cast<size_t>(block * in)), yb(static_cast<size_t>(n * block));
  for (int64_t r0 = 0; r0 < out; r0 += block) {
    const int64_t rows = std::min(block, out - r0);
    pool.parallel_for(rows, 8, [&](int64_t a, int64_t b) {
      packed_dequantize_rows(w, r0 + a, r0 + b, wb.data() + a * in);
    });
    Tensor wt(wb.data(), DType::F32, {rows, in});
    Tensor yt(yb.data(), DType::F32, {n, rows});
    matmul(yt, x, wt, Tensor{}, pool);
    for (int64_t t = 0; t < n; ++t)
      std::copy_n(yb.data() + t * rows, rows, y.as<float>() + t * out + r0);
  }
}

}  // namespace

void packed_dequantize_rows(const Tensor& w, int64_t r0, int64_t r1, float* out) {
  const int64_t in = w.cols();
  if (w.packed.format == WeightFormat::Affine) {
    const int bits = w.packed.bits, group = w.packed.group_size;
    const int64_t groups = in / group, words = quant::affine_words_per_row(in, bits);
    const size_t param_size = dtype_size(w.packed.param_dtype);
    std::vector<float> scales(static_cast<size_t>(groups)), biases(scales.size());
    for (int64_t r = r0; r < r1; ++r) {
      quant::affine_params_to_f32(
          static_cast<const char*>(w.packed.scales) + r * groups * param_size, w.packed.param_dtype,
          groups, scales.data());
      quant::affine_params_to_f32(
          static_cast<const char*>(w.packed.biases) + r * groups * param_size, w.packed.param_dtype,
          groups, biases.data());
      quant::affine_dequantize_row(w.as<const uint32_t>() + r * words, scales.data(), biases.data(),
                                   in, bits, group, out + (r - r0) * in);
    }
    return;
  }
  if (w.packed.format == WeightFormat::Trellis && w.packed.axis == 1) {
    const int64_t words = in * w.packed.bits / 32;
    quant::dequantize_trellis_rows(w.as<const uint32_t>() + r0 * words,
                                   static_cast<const uint16_t*>(w.packed.scales) + r0, r1 - r0, in,
                                   w.packed.bits, out);
    return;
  }
  if (w.packed.format == WeightFormat::Trellis) {
    // Stored transposed: decode every stored row [in, out] once and pick the columns wanted.
    const int64_t out_dim = w.rows();
    std::vector<float> wt(static_cast<size_t>(in * out_dim));
    quant::dequantize_trellis_rows(w.as<const uint32_t>(),
                                   static_cast<const uint16_t*>(w.packed.scales), in, out_dim,
                                   w.packed.bits, wt.data());
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t i = 0; i < in; ++i) out[(r - r0) * in + i] = wt[size_t(i * out_dim + r)];
    return;
  }
  fail("cannot dequantize {}", w.describe());
}

void packed_matmul(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                   ThreadPool& pool) {
  if (w.ndim != 2) fail("packed matmul needs a 2-D weight, got {}", w.describe());
  if (x.cols() != w.cols() || y.numel() != x.rows() * w.rows())
    fail("packed matmul shapes: y {} = x {} · w {}ᵀ", y.describe(), x.describe(), w.describe());
  const int64_t n = x.rows();
  const bool transposed_trellis = w.packed.format == WeightFormat::Trellis && w.packed.axis == 0;
  if (w.packed.format == WeightFormat::Trellis && (n <= kDirectRows || transposed_trellis)) {
    trellis_matvec(w.as<const uint32_t>(), static_cast<const uint16_t*>(w.packed.scales), w.rows(),
                   w.cols(), w.packed.bits, w.packed.axis, x.as<const float>(), n, y.as<float>(),
                   pool);
  } else if (w.packed.format == WeightFormat::Affine && n <= kDirectRows) {
    affine_direct(y, x, w, pool);
  } else {
    blocked(y, x, w, pool);
  }
  add_bias(y, bias, w.rows());
}

}  // namespace hearth::cpu
