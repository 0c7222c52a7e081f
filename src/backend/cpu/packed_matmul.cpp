#include "backend/cpu/packed_matmul.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/affine_matvec.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/trellis_matvec.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/affine.h"
#include "quant/trellis.h"

namespace hearth::cpu {

namespace {

// Up to this many input rows read the codes directly; more go through dequantized blocks.
constexpr int64_t kDirectRows = 8;
// Output rows dequantized per block on the prefill path (f32 scratch of kBlockRows · in).
constexpr int64_t kBlockRows = 512;

void add_bias(const Tensor& y, const Tensor& bias, int64_t out) {
  if (bias.empty()) return;
  std::vector<float> b(static_cast<size_t>(out));
  load_f32(b.data(), bias.data, bias.dtype, out);
  for (int64_t t = 0; t < y.numel() / out; ++t)
    for (int64_t r = 0; r < out; ++r) y.as<float>()[t * out + r] += b[size_t(r)];
}

// W's rows [r0, r1) of a transposed trellis weight (stored rows = W's columns, coded along W's
// rows), for W's columns [i0, i1): only the 256-weight blocks of each stored row that hold those
// rows are decoded, so a pass over all row blocks decodes the matrix once. out [r1 - r0, in].
void dequantize_transposed_trellis(const Tensor& w, int64_t r0, int64_t r1, int64_t i0, int64_t i1,
                                   float* out) {
  constexpr int64_t kT = quant::TrellisSpec::kBlock;
  const int k = w.packed.bits;
  const int64_t in = w.cols(), row_words = quant::TrellisSpec::row_words(w.rows(), k);
  const auto* codes = w.as<const uint32_t>();
  const auto* scales = static_cast<const uint16_t*>(w.packed.scales);
  float values[kT];
  for (int64_t i = i0; i < i1; ++i) {
    const float scale = f16_to_f32(scales[i]);
    for (int64_t b = r0 / kT; b * kT < r1; ++b) {
      quant::trellis_decode_block(codes + i * row_words + b * quant::TrellisSpec::block_words(k), k,
                                  values);
      const int64_t t0 = std::max(r0, b * kT), t1 = std::min(r1, (b + 1) * kT);
      for (int64_t r = t0; r < t1; ++r) out[(r - r0) * in + i] = values[r - b * kT] * scale;
    }
  }
}

// Many input rows: dequantize kBlockRows output rows at a time and run the dense product.
void blocked(const Tensor& y, const Tensor& x, const Tensor& w, ThreadPool& pool) {
  const int64_t n = x.rows(), in = w.cols(), out = w.rows();
  const int64_t block = std::min(out, kBlockRows);
  const bool transposed = w.packed.format == WeightFormat::Trellis && w.packed.axis == 0;
  std::vector<float> wb(static_cast<size_t>(block * in)), yb(static_cast<size_t>(n * block));
  for (int64_t r0 = 0; r0 < out; r0 += block) {
    const int64_t rows = std::min(block, out - r0);
    if (transposed)  // split over W's columns: each stored row's blocks are decoded once
      pool.parallel_for(in, 8, [&](int64_t a, int64_t b) {
        dequantize_transposed_trellis(w, r0, r0 + rows, a, b, wb.data());
      });
    else
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
  if (w.packed.format == WeightFormat::Affine) return affine_dequantize_rows(w, r0, r1, out);
  if (w.packed.format == WeightFormat::Trellis && w.packed.axis == 1) {
    const int64_t words = in * w.packed.bits / 32;
    quant::dequantize_trellis_rows(w.as<const uint32_t>() + r0 * words,
                                   static_cast<const uint16_t*>(w.packed.scales) + r0, r1 - r0, in,
                                   w.packed.bits, out);
    return;
  }
  if (w.packed.format == WeightFormat::Trellis) {
    // Stored transposed: each stored row's blocks that hold outputs [r0, r1), and only those.
    dequantize_transposed_trellis(w, r0, r1, 0, in, out);
    return;
  }
  fail("cannot dequantize {}", w.describe());
}

void packed_matmul(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                   ThreadPool& pool, bool batch_invariant) {
  if (w.ndim != 2) fail("packed matmul needs a 2-D weight, got {}", w.describe());
  if (x.cols() != w.cols() || y.numel() != x.rows() * w.rows())
    fail("packed matmul shapes: y {} = x {} · w {}ᵀ", y.describe(), x.describe(), w.describe());
  const int64_t n = x.rows();
  const bool direct = n <= kDirectRows || batch_invariant;
  if (w.packed.format == WeightFormat::Trellis && direct) {
    trellis_matvec(w.as<const uint32_t>(), static_cast<const uint16_t*>(w.packed.scales), w.rows(),
                   w.cols(), w.packed.bits, w.packed.axis, x.as<const float>(), n, y.as<float>(),
                   pool);
  } else if (w.packed.format == WeightFormat::Affine && (direct || affine_matvec_has_gemm(w))) {
    affine_matvec(y, x, w, pool, !batch_invariant);
  } else {
    blocked(y, x, w, pool);
  }
  add_bias(y, bias, w.rows());
}

}  // namespace hearth::cpu
