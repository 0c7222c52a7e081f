// MLX's affine format checked against an independent reading of its documentation: the codes of a
// row are one little-endian bit stream (code i at bits [i·bits, (i+1)·bits), least significant
// bit first, across 32-bit words), and w = scale · code + bias per group. The reference packs bit
// by bit into bytes and shares nothing with src/quant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/affine.h"

namespace hearth {
namespace {

std::vector<uint32_t> reference_pack(const std::vector<uint32_t>& codes, int bits) {
  std::vector<uint8_t> bytes(codes.size() * size_t(bits) / 8 + 8, 0);
  size_t bit = 0;
  for (uint32_t c : codes)
    for (int b = 0; b < bits; ++b, ++bit)
      if ((c >> b) & 1u) bytes[bit / 8] |= uint8_t(1u << (bit % 8));
  std::vector<uint32_t> words(codes.size() * size_t(bits) / 32);
  for (size_t w = 0; w < words.size(); ++w)  // little-endian words
    words[w] = uint32_t(bytes[4 * w]) | uint32_t(bytes[4 * w + 1]) << 8 |
               uint32_t(bytes[4 * w + 2]) << 16 | uint32_t(bytes[4 * w + 3]) << 24;
  return words;
}

class AffineFormat : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(AffineFormat, PackingAndDequantizationMatchTheReference) {
  const auto [bits, group] = GetParam();
  const int64_t cols = 3 * group;  // several groups, and word boundaries inside codes
  std::mt19937 rng(uint32_t(bits * 1000 + group));
  std::vector<uint32_t> codes(static_cast<size_t>(cols));
  for (auto& c : codes) c = rng() & ((1u << bits) - 1);
  const std::vector<uint32_t> words = reference_pack(codes, bits);
  ASSERT_EQ(int64_t(words.size()), quant::affine_words_per_row(cols, bits));
  for (int64_t i = 0; i < cols; ++i)
    ASSERT_EQ(quant::affine_code(words.data(), i, bits), codes[size_t(i)]) << "code " << i;

  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> scales(static_cast<size_t>(cols / group)), biases(scales.size());
  for (size_t g = 0; g < scales.size(); ++g) {
    scales[g] = g % 2 ? -std::fabs(normal(rng)) : std::fabs(normal(rng));  // MLX scales may be < 0
    biases[g] = normal(rng);
  }
  std::vector<float> got(static_cast<size_t>(cols));
  quant::affine_dequantize_row(words.data(), scales.data(), biases.data(), cols, bits, group,
                               got.data());
  for (int64_t i = 0; i < cols; ++i) {
    const size_t g = size_t(i / group);
    const float want = scales[g] * float(codes[size_t(i)]) + biases[g];
    ASSERT_EQ(std::memcmp(&got[size_t(i)], &want, 4), 0) << "value " << i;
  }

  // The encoder writes the same stream: values that are exactly the codes come back as them.
  std::vector<float> values(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) values[size_t(i)] = float(codes[size_t(i)]);
  std::vector<float> ones(scales.size(), 1.0f), zeros(scales.size(), 0.0f);
  std::vector<uint32_t> packed(words.size());
  quant::affine_requantize_row(values.data(), cols, bits, group, ones.data(), zeros.data(),
                               packed.data());
  EXPECT_EQ(packed, words);
}

// The quantizer's squared error per group against min/max (bias = the minimum, scale = the
// range / (2^bits − 1), every value within half a step), written out here: never worse in any
// group, and clearly better over Gaussian groups at low bits (the scale search's purpose). A
// constant group and an all-positive one are included.
TEST_P(AffineFormat, QuantizerBeatsMinMaxInEveryGroup) {
  const auto [bits, group] = GetParam();
  const int64_t cols = 64 * group;
  std::mt19937 rng(uint32_t(bits + group));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(cols));
  for (auto& v : w) v = normal(rng);
  for (int i = 0; i < group; ++i) w[size_t(group + i)] = 3.0f + 0.01f * float(i);  // all positive
  for (int i = 0; i < group; ++i) w[size_t(2 * group + i)] = -0.25f;               // constant
  std::vector<uint32_t> codes(static_cast<size_t>(quant::affine_words_per_row(cols, bits)));
  std::vector<float> scales(static_cast<size_t>(cols / group)), biases(scales.size()),
      back(static_cast<size_t>(cols));
  quant::affine_quantize_row(w.data(), cols, bits, group, codes.data(), scales.data(),
                             biases.data());
  quant::affine_dequantize_row(codes.data(), scales.data(), biases.data(), cols, bits, group,
                               back.data());
  const float top = float((1 << bits) - 1);
  double total = 0, total_min_max = 0;
  for (int64_t g = 0; g < cols / group; ++g) {
    const float* v = &w[size_t(g * group)];
    float lo = v[0], hi = v[0];
    for (int i = 0; i < group; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
    const float step = (hi - lo) / top;
    double err = 0, err_min_max = 0;
    for (int i = 0; i < group; ++i) {
      const float q = step > 0 ? std::clamp(std::nearbyint((v[i] - lo) / step), 0.0f, top) : 0.0f;
      const double d = double(v[i]) - (double(step) * q + lo);
      EXPECT_LE(std::fabs(d), 0.5 * step * 1.0001 + 1e-6);  // the reference is min/max
      err_min_max += d * d;
      const double e = double(v[i]) - back[size_t(g * group + i)];
      err += e * e;
    }
    EXPECT_LE(err, err_min_max * (1 + 1e-5) + 1e-12) << "group " << g;
    if (g == 2) {
      EXPECT_NEAR(back[size_t(g * group)], -0.25f, 1e-6f) << "constant group";
    }
    total += err, total_min_max += err_min_max;
  }
  if (bits <= 4) {
    EXPECT_LT(total, 0.9 * total_min_max);
  }
}

INSTANTIATE_TEST_SUITE_P(BitsAndGroups, AffineFormat,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 6, 8),
                                            ::testing::Values(32, 64, 128)));

TEST(AffineFormat, SupportedParameters) {
  for (int b : {2, 3, 4, 5, 6, 8}) EXPECT_TRUE(quant::affine_bits_supported(b));
  for (int b : {0, 1, 7, 9, 16}) EXPECT_FALSE(quant::affine_bits_supported(b));
  for (int g : {32, 64, 128}) EXPECT_TRUE(quant::affine_group_size_supported(g));
  for (int g : {0, 16, 48, 256}) EXPECT_FALSE(quant::affine_group_size_supported(g));
}

}  // namespace
}  // namespace hearth
