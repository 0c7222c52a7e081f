// Gated DeltaNet element-wise pieces on the CPU: the causal depthwise conv1d (+ SiLU) with its
// carried state, the decay / write-strength gates, and the SiLU-gated RMSNorm. They are O(n·C)
// and a small share of a layer, so they are plain loops over contiguous channels that the
// compiler vectorises. Formulas follow transformers (f32 throughout).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/gated_delta.h"
#include "backend/cpu/ops.h"

namespace hearth::cpu {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
}  // namespace

void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state, const Tensor& w) {
  const int64_t n = x.rows(), C = x.cols(), K = w.rows();
  const float* wf = w.as<const float>();
  float* st = state.as<float>();
  const float* xs = x.as<const float>();
  thread_local std::vector<const float*> taps;
  taps.resize(size_t(K));
  for (int64_t t = 0; t < n; ++t) {
    // Tap j reads input position t - (K-1) + j: from the carried state when it is negative.
    for (int64_t j = 0; j < K; ++j) {
      const int64_t p = t - (K - 1) + j;
      taps[size_t(j)] = p >= 0 ? xs + p * C : st + (K - 1 + p) * C;
    }
    float* out = y.as<float>() + t * C;
    for (int64_t c = 0; c < C; ++c) out[c] = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      const float* in = taps[size_t(j)];
      const float* wj = wf + j * C;
      for (int64_t c = 0; c < C; ++c) out[c] += wj[c] * in[c];
    }
    for (int64_t c = 0; c < C; ++c) out[c] = out[c] * sigmoid(out[c]);
  }
  // New state: the last K-1 rows of [state ‖ x].
  const int64_t keep = K - 1;
  if (keep <= 0) return;
  if (n >= keep) {
    std::memcpy(st, xs + (n - keep) * C, size_t(keep * C) * sizeof(float));
  } else {
    std::memmove(st, st + n * C, size_t((keep - n) * C) * sizeof(float));
    std::memcpy(st + (keep - n) * C, xs, size_t(n * C) * sizeof(float));
  }
}

void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                       const Tensor& a_log, const Tensor& dt_bias) {
  const int64_t n = a.rows(), h = a.cols();
  const float* al = a_log.as<const float>();
  const float* dt = dt_bias.as<const float>();
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < h; ++i) {
      const int64_t x = t * h + i;
      g.as<float>()[x] = -std::exp(al[i]) * softplus(a.as<const float>()[x] + dt[i]);
      beta.as<float>()[x] = sigmoid(b.as<const float>()[x]);
    }
}

void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z, float eps) {
  const int64_t len = w.numel(), rows = x.numel() / len;
  thread_local std::vector<float> gain;
  gain.resize(size_t(len));
  load_f32(gain.data(), w.data, w.dtype, len);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.as<const float>() + r * len;
    const float* zr = z.as<const float>() + r * len;
    float* yr = y.as<float>() + r * len;
    float sum = 0.0f;
    for (int64_t i = 0; i < len; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / float(len) + eps);
    // transformers: weight * normalised, then * silu(z).
    for (int64_t i = 0; i < len; ++i) yr[i] = gain[size_t(i)] * (xr[i] * inv) * (zr[i] * sigmoid(zr[i]));
  }
}

}  // namespace hearth::cpu
