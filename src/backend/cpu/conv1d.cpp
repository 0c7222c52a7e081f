// Gated DeltaNet element-wise pieces on the CPU: the causal depthwise conv1d (+ SiLU) with its
// carried state, the decay / write-strength gates, and the SiLU-gated RMSNorm. They are O(n·C)
// but were ~10% of a Qwen3.5 prefill when scalar and single-threaded (one expf per element), so
// the conv and the norm run 16 lanes at a time with a vector exp (gdn_simd.h), split over the
// thread pool when the call is big enough to pay for the hand-off (prefill, not decode).
// Formulas follow transformers (f32 throughout).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/gated_delta.h"
#include "backend/cpu/gdn_simd.h"
#include "backend/cpu/ops.h"

namespace hearth::cpu {

namespace {

using gdn::v16;

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with beta 1 and threshold 20.
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Below this many elements a call runs on the calling thread (decode: one token).
constexpr int64_t kParallelMin = int64_t(1) << 15;

struct ConvArgs {
  float* y;
  const float* x;
  float* state;
  const float* w;
  int64_t n, C, K;
};

// Input row p of [state ‖ x] (p < 0 reads the carried state).
GDN_INLINE const float* conv_tap(const ConvArgs& a, int64_t p) {
  return p >= 0 ? a.x + p * a.C : a.state + (a.K - 1 + p) * a.C;
}

// Channels [c0, c1): every token, then the new state (the last K-1 rows of [state ‖ x]) for
// these channels only — no other thread reads them, so it can be written right away.
// Tokens are the outer loop so that rows are streamed contiguously: a channel-outer order
// strides 4·C bytes per token and misses cache on every row once x outgrows L2.
GDN_INLINE void conv_channels(const ConvArgs& a, int64_t c0, int64_t c1) {
  const int64_t K = a.K, C = a.C;
  thread_local std::vector<const float*> taps;
  taps.resize(size_t(K));
  for (int64_t t = 0; t < a.n; ++t) {
    for (int64_t j = 0; j < K; ++j) taps[size_t(j)] = conv_tap(a, t - (K - 1) + j);
    float* y = a.y + t * C;
    int64_t c = c0;
    for (; c + 16 <= c1; c += 16) {
      v16 acc{};
      for (int64_t j = 0; j < K; ++j)
        acc += gdn::load16(a.w + j * C + c) * gdn::load16(taps[size_t(j)] + c);
      gdn::store16(y + c, gdn::silu16(acc));
    }
    for (; c < c1; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) acc += a.w[j * C + c] * taps[size_t(j)][c];
      y[c] = acc * sigmoid(acc);
    }
  }
  const int64_t keep = K - 1, m = c1 - c0;
  if (keep <= 0) return;
  if (a.n >= keep) {
    for (int64_t r = 0; r < keep; ++r)
      std::memcpy(a.state + r * C + c0, a.x + (a.n - keep + r) * C + c0, size_t(m) * sizeof(float));
  } else {
    // Rows move up by n: read before overwritten because r + n > r.
    for (int64_t r = 0; r < keep - a.n; ++r)
      std::memcpy(a.state + r * C + c0, a.state + (r + a.n) * C + c0, size_t(m) * sizeof(float));
    for (int64_t r = 0; r < a.n; ++r)
      std::memcpy(a.state + (keep - a.n + r) * C + c0, a.x + r * C + c0, size_t(m) * sizeof(float));
  }
}

struct NormArgs {
  float* y;
  const float* x;
  const float* z;
  const float* gain;
  int64_t len;
  float eps;
};

GDN_INLINE void norm_rows(const NormArgs& a, int64_t r0, int64_t r1) {
  const int64_t len = a.len;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = a.x + r * len;
    const float* zr = a.z + r * len;
    float* yr = a.y + r * len;
    const float inv = 1.0f / std::sqrt(gdn::sum_squares(xr, len) / float(len) + a.eps);
    // transformers: weight * normalised, then * silu(z).
    int64_t i = 0;
    for (; i + 16 <= len; i += 16)
      gdn::store16(yr + i, gdn::load16(a.gain + i) * (gdn::load16(xr + i) * inv) *
                               gdn::silu16(gdn::load16(zr + i)));
    for (; i < len; ++i) yr[i] = a.gain[i] * (xr[i] * inv) * (zr[i] * sigmoid(zr[i]));
  }
}

#if defined(__x86_64__)
GDN_TARGET_AVX512 void conv_avx512(const ConvArgs& a, int64_t c0, int64_t c1) {
  conv_channels(a, c0, c1);
}
GDN_TARGET_AVX2 void conv_avx2(const ConvArgs& a, int64_t c0, int64_t c1) {
  conv_channels(a, c0, c1);
}
GDN_TARGET_AVX512 void norm_avx512(const NormArgs& a, int64_t r0, int64_t r1) {
  norm_rows(a, r0, r1);
}
GDN_TARGET_AVX2 void norm_avx2(const NormArgs& a, int64_t r0, int64_t r1) { norm_rows(a, r0, r1); }
#endif
void conv_baseline(const ConvArgs& a, int64_t c0, int64_t c1) { conv_channels(a, c0, c1); }
void norm_baseline(const NormArgs& a, int64_t r0, int64_t r1) { norm_rows(a, r0, r1); }

void conv_run(const ConvArgs& a, int64_t c0, int64_t c1) {
  switch (gdn::isa()) {
#if defined(__x86_64__)
    case gdn::Isa::Avx512:
      conv_avx512(a, c0, c1);
      return;
    case gdn::Isa::Avx2:
      conv_avx2(a, c0, c1);
      return;
#endif
    default:
      conv_baseline(a, c0, c1);
  }
}

void norm_run(const NormArgs& a, int64_t r0, int64_t r1) {
  switch (gdn::isa()) {
#if defined(__x86_64__)
    case gdn::Isa::Avx512:
      norm_avx512(a, r0, r1);
      return;
    case gdn::Isa::Avx2:
      norm_avx2(a, r0, r1);
      return;
#endif
    default:
      norm_baseline(a, r0, r1);
  }
}

}  // namespace

void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state, const Tensor& w,
                        ThreadPool& pool) {
  const ConvArgs a{y.as<float>(),     x.as<const float>(),
                   state.as<float>(), w.as<const float>(),
                   x.rows(),          x.cols(),
                   w.rows()};
  if (a.n * a.C < kParallelMin || pool.size() == 1) {
    conv_run(a, 0, a.C);
    return;
  }
  // Split in whole 16-channel blocks so every thread stays on the vector path.
  const int64_t blocks = (a.C + 15) / 16;
  pool.parallel_for(blocks, 1,
                    [&](int64_t b0, int64_t b1) { conv_run(a, b0 * 16, std::min(a.C, b1 * 16)); });
}

void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                       const Tensor& a_log, const Tensor& dt_bias) {
  // n_tokens x n_v_heads values (8 K per layer of a 512-token prefill): scalar is fine.
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

void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z, float eps,
                    ThreadPool& pool) {
  const int64_t len = w.numel(), rows = x.numel() / len;
  thread_local std::vector<float> gain;
  gain.resize(size_t(len));
  load_f32(gain.data(), w.data, w.dtype, len);
  const NormArgs a{y.as<float>(), x.as<const float>(), z.as<const float>(), gain.data(), len, eps};
  if (rows * len < kParallelMin || pool.size() == 1) {
    norm_run(a, 0, rows);
    return;
  }
  pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) { norm_run(a, r0, r1); });
}

}  // namespace hearth::cpu
