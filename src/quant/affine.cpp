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

}  // namespace

void affine_quantize_row(const float* w, int64_t cols, int bits, int group_size, uint32_t* codes,
                         float* scales, float* biases) {
  const float n_bins = float((1 << bits) - 1);
  std::fill(codes, codes + affine_words_per_row(cols, bits), 0u);
  for (int64_t g = 0; g * group_size < cols; ++g) {
    const float* x = w + g * group_size;
    float lo = x[0], hi = x[0];
    for (int i = 1; i < group_size; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    // The group's range in 2^bits - 1 equal steps from its minimum: every value within half a
    // step. (Snapping the scale so that zero is exactly a code would clip the far end of the
    // range at low bits; the stored form does not depend on how scales were chosen.)
    scales[g] = std::max((hi - lo) / n_bins, 1e-7f);
    biases[g] = lo;
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
