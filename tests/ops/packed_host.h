// Packed weights on the host for the CUDA tests: random codes and parameters (every state and
// code value occurs), the dense values the format's reference decoder gives (src/quant), and a
// double-precision product with them.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "quant/affine.h"
#include "quant/trellis.h"

namespace hearth::test {

// A packed weight on the host: random codes and parameters, and the dense [out, in] values its
// reference decoder gives.
struct HostPacked {
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales, biases;
  std::vector<float> dense;
  Tensor w;
};

inline HostPacked random_affine(int64_t out, int64_t in, int bits, int group, DType param_dtype,
                                uint32_t seed) {
  std::mt19937 rng(seed);
  HostPacked p;
  const int64_t groups = in / group, words = quant::affine_words_per_row(in, bits);
  p.codes.resize(size_t(out * words));
  for (auto& c : p.codes) c = rng();
  std::uniform_real_distribution<float> scale(0.002f, 0.05f), bias(-0.3f, 0.1f);
  p.scales.resize(size_t(out * groups));
  p.biases.resize(p.scales.size());
  std::vector<float> s(static_cast<size_t>(groups)), b(static_cast<size_t>(groups));
  p.dense.resize(size_t(out * in));
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const size_t i = size_t(r * groups + g);
      const float sv = scale(rng), bv = bias(rng);
      p.scales[i] = param_dtype == DType::F16 ? f32_to_f16(sv) : f32_to_bf16(sv);
      p.biases[i] = param_dtype == DType::F16 ? f32_to_f16(bv) : f32_to_bf16(bv);
      s[size_t(g)] = param_dtype == DType::F16 ? f16_to_f32(p.scales[i]) : bf16_to_f32(p.scales[i]);
      b[size_t(g)] = param_dtype == DType::F16 ? f16_to_f32(p.biases[i]) : bf16_to_f32(p.biases[i]);
    }
    quant::affine_dequantize_row(p.codes.data() + r * words, s.data(), b.data(), in, bits, group,
                                 p.dense.data() + r * in);
  }
  p.w = Tensor(p.codes.data(), DType::U32, {out, in});
  p.w.packed = {WeightFormat::Affine, uint8_t(bits),  1, uint16_t(group), param_dtype,
                p.scales.data(),      p.biases.data()};
  return p;
}

// axis 1: codes of W [out, in]; axis 0: of Wᵀ [in, out].
inline HostPacked random_trellis(int64_t out, int64_t in, int k, int axis, uint32_t seed) {
  std::mt19937 rng(seed);
  HostPacked p;
  const int64_t rows = axis == 1 ? out : in, cols = axis == 1 ? in : out;
  p.codes.resize(size_t(rows * cols * k / 32));
  for (auto& c : p.codes) c = rng();
  std::uniform_real_distribution<float> scale(0.005f, 0.05f);
  p.scales.resize(size_t(rows));
  for (auto& s : p.scales) s = f32_to_f16(scale(rng));
  std::vector<float> stored(size_t(rows * cols));
  quant::dequantize_trellis_rows(p.codes.data(), p.scales.data(), rows, cols, k, stored.data());
  p.dense.resize(size_t(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      p.dense[size_t(o * in + i)] =
          axis == 1 ? stored[size_t(o * in + i)] : stored[size_t(i * out + o)];
  p.w = Tensor(p.codes.data(), DType::U32, {out, in});
  p.w.packed = {WeightFormat::Trellis, uint8_t(k), uint8_t(axis), 256, DType::F16,
                p.scales.data(),       nullptr};
  return p;
}

// y = x · denseᵀ + bias in double.
inline std::vector<float> reference(const std::vector<float>& x, const HostPacked& p,
                                    const std::vector<float>& bias, int64_t n, int64_t out,
                                    int64_t in) {
  std::vector<float> y(size_t(n * out));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bias.empty() ? 0.0 : bias[size_t(o)];
      for (int64_t i = 0; i < in; ++i)
        acc += double(x[size_t(r * in + i)]) * p.dense[size_t(o * in + i)];
      y[size_t(r * out + o)] = float(acc);
    }
  return y;
}

}  // namespace hearth::test
