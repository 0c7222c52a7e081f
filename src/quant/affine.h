// MLX affine quantization, exactly as mlx-community checkpoints store it: each row of W [rows,
// cols] is cut into groups of `group_size` values; a value is w = scale · q + bias with q an
// unsigned `bits`-bit code and one scale and bias per group. The codes of a row form one
// little-endian bit stream (code i at bits [i·bits, (i+1)·bits), LSB first, crossing word
// boundaries for 3, 5 and 6 bits) stored as uint32 words [rows, cols·bits/32]. Scales and biases
// are [rows, cols/group_size] in bf16, f16 or f32.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace hearth::quant {

bool affine_bits_supported(int bits);         // 2, 3, 4, 5, 6, 8
bool affine_group_size_supported(int group);  // 32, 64, 128
// uint32 words holding one row's codes. cols must be a multiple of a supported group size,
// which makes cols · bits a multiple of 32.
inline int64_t affine_words_per_row(int64_t cols, int bits) { return cols * bits / 32; }

// Code i of a row's bit stream.
inline uint32_t affine_code(const uint32_t* row, int64_t i, int bits) {
  const int64_t bit = i * bits;
  const int64_t word = bit >> 5;
  const int shift = int(bit & 31);
  uint64_t v = row[word] >> shift;
  if (shift + bits > 32) v |= uint64_t(row[word + 1]) << (32 - shift);
  return uint32_t(v) & ((1u << bits) - 1);
}

// One row's scales or biases as f32 (n values of dtype F32, F16 or BF16).
void affine_params_to_f32(const void* src, DType dtype, int64_t n, float* dst);

// Quantizes one row: per group, the scale and bias of least squared error found by a search
// that starts from min/max (bias = the minimum, scale = (max − min) / (2^bits − 1)) and never
// ends worse than it; codes rounded to nearest (scale ≥ 1e-7 for constant groups). scales and
// biases get cols/group values each, in f32: a caller storing them in a narrower dtype
// recomputes the codes for the rounded values with affine_requantize_row.
void affine_quantize_row(const float* w, int64_t cols, int bits, int group_size, uint32_t* codes,
                         float* scales, float* biases);

// Recomputes a row's codes for scales and biases already rounded to their stored dtype, so that
// dequantization with the stored values is the closest the codes allow.
void affine_requantize_row(const float* w, int64_t cols, int bits, int group_size,
                           const float* scales, const float* biases, uint32_t* codes);

// w[i] = scale · code + bias for one row, with scales and biases in f32.
void affine_dequantize_row(const uint32_t* codes, const float* scales, const float* biases,
                           int64_t cols, int bits, int group_size, float* out);

}  // namespace hearth::quant
