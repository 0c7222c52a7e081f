// Row ops for the mixture-of-experts block and the sigmoid gates of Qwen3.5 / Qwen3-Next:
// gathering the tokens routed to one expert, scatter-adding its weighted outputs back, and
// x · sigmoid(gate) (attention output gate, shared-expert gate). Memory-bound copies.
#include <cmath>
#include <cstring>

#include "backend/cpu/gated_delta.h"

namespace hearth::cpu {

void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) {
  const int64_t rows = x.rows(), cols = x.cols();
  const bool broadcast = gate.numel() == rows && cols != 1;
  const float* xs = x.as<const float>();
  const float* gs = gate.as<const float>();
  float* out = y.as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    if (broadcast) {
      const float s = 1.0f / (1.0f + std::exp(-gs[r]));
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = xs[r * cols + c] * s;
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t i = r * cols + c;
        out[i] = xs[i] * (1.0f / (1.0f + std::exp(-gs[i])));
      }
    }
  }
}

void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) {
  const int64_t cols = x.cols();
  for (int64_t i = 0; i < y.rows(); ++i)
    std::memcpy(y.as<float>() + i * cols, x.as<const float>() + int64_t(rows[i]) * cols,
                size_t(cols) * sizeof(float));
}

void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows, const float* weights) {
  const int64_t cols = x.cols();
  for (int64_t i = 0; i < x.rows(); ++i) {
    float* dst = y.as<float>() + int64_t(rows[i]) * cols;
    const float* src = x.as<const float>() + i * cols;
    const float w = weights[i];
    for (int64_t c = 0; c < cols; ++c) dst[c] += w * src[c];
  }
}

}  // namespace hearth::cpu
