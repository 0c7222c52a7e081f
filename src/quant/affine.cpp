#include "quant/affine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace hearth::quant {

bool affine_bits_supported(int bits) {
  return bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
}

bool affine_group_size_supported(int group) { return group == 32 || group == 64 || group == 128; }

void affine_params_to_f32(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return;
    default:
      fail("affine scales and biases must be F32, F16 or BF16, got {}", dtype_name(dtype));
  }
}

namespace {

void put_code(uint32_t* row, int64_t i, int bits, uint32_t q) {
  const int64_t bit = i * bits;
  const int64_t word = bit >> 5;
  const int shift = int(bit & 31);
  row[word] |= q << shift;
  if (shift + bits > 32) row[word + 1] |= q >> (32 - shift);
}

void encode_group(const float* w, int n, int bits, float scale, float bias, uint32_t* row,
                  int64_t first) {
  const float n_bins = float((1 << bits) - 1);
  for (int i = 0; i < n; ++i) {
    const float q = scale == 0.0f ? 0.0f : std::nearbyint((w[i] - bias) / scale);
    put_code(row, first + i, bits, uint32_t(std::clamp(q, 0.0f, n_bins)));
  }
}

// The scale and bias that minimise Σ(x − s·q − b)² for fixed codes q (a least-squares line
// through the points (q, x)); false when the codes are all equal or the slope is not positive.
bool fit_line(const float* x, const float* q, int n, float& s, float& b) {
  double sq = 0, sqq = 0, sx = 0, sqx = 0;
  for (int i = 0; i < n; ++i) {
    sq += q[i];
    sqq += double(q[i]) * q[i];
    sx += x[i];
    sqx += double(q[i]) * x[i];
  }
  const double det = n * sqq - sq * sq;
  if (det <= 0) return false;
  const double slope = (n * sqx - sq * sx) / det;
  if (!(slope > 1e-7)) return false;
  s = float(slope);
  b = float((sx - slope * sq) / n);
  return true;
}

// Σ(x − s·q − b)² with q the nearest codes for (s, b), which are written to q.
double round_and_error(const float* x, int n, int bits, float s, float b, float* q) {
  const float n_bins = float((1 << bits) - 1);
  double err = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = std::clamp(std::nearbyint((x[i] - b) / s), 0.0f, n_bins);
    const double d = double(x[i]) - (double(s) * q[i] + b);
    err += d * d;
  }
  return err;
}

// One group's scale and bias. The start is the range in 2^bits − 1 equal steps from the
// minimum (every value within half a step). Then, as llama.cpp's k-quants search their scales
// (make_qkx2_quants), codes are taken for step counts from 2^bits − 2 to 2^bits across the
// range, a least-squares line is fitted to each set of codes, and the fit of smallest squared
// error wins, refined by rounding to it and fitting again. The search only ever keeps a better
// fit, so no group is worse than min/max; on N(0, 1) groups of 64 it lowers the 4-bit error by
// about a fifth (QUANTIZATION.md).
void fit_group(const float* x, int n, int bits, float& scale, float& bias) {
  constexpr int kSteps = 20;
  const float n_bins = float((1 << bits) - 1);
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  scale = std::max((hi - lo) / n_bins, 1e-7f);
  bias = lo;
  if (hi == lo) return;
  float q[256];
  double best = round_and_error(x, n, bits, scale, bias, q);
  for (int k = 0; k <= kSteps; ++k) {
    const float steps = n_bins - 1.0f + 2.0f * float(k) / kSteps;
    const float trial = (hi - lo) / steps;
    round_and_error(x, n, bits, trial, lo, q);
    float s, b;
    if (!fit_line(x, q, n, s, b)) continue;
    const double err = round_and_error(x, n, bits, s, b, q);
    if (err < best) best = err, scale = s, bias = b;
  }
  round_and_error(x, n, bits, scale, bias, q);
  float s, b;
  if (fit_line(x, q, n, s, b) && round_and_error(x, n, bits, s, b, q) < best) scale = s, bias = b;
}

}  // namespace

void affine_quantize_row(const float* w, int64_t cols, int bits, int group_size, uint32_t* codes,
                         float* scales, float* biases) {
  std::fill(codes, codes + affine_words_per_row(cols, bits), 0u);
  for (int64_t g = 0; g * group_size < cols; ++g) {
    const float* x = w + g * group_size;
    fit_group(x, group_size, bits, scales[g], biases[g]);
    encode_group(x, group_size, bits, scales[g], biases[g], codes, g * group_size);
  }
}

void affine_requantize_row(const float* w, int64_t cols, int bits, int group_size,
                           const float* scales, const float* biases, uint32_t* codes) {
  std::fill(codes, codes + affine_words_per_row(cols, bits), 0u);
  for (int64_t g = 0; g * group_size < cols; ++g)
    encode_group(w + g * group_size, group_size, bits, scales[g], biases[g], codes, g * group_size);
}

void affine_dequantize_row(const uint32_t* codes, const float* scales, const float* biases,
                           int64_t cols, int bits, int group_size, float* out) {
  for (int64_t i = 0; i < cols; ++i) {
    const int64_t g = i / group_size;
    out[i] = scales[g] * float(affine_code(codes, i, bits)) + biases[g];
  }
}

}  // namespace hearth::quant
