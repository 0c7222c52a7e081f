// The vectorised, multithreaded pieces around the Gated DeltaNet CPU op against direct formulas:
// the vector exp (gdn_simd.h) against std::exp over the range the kernels use, the causal conv1d
// + SiLU and the SiLU-gated RMSNorm on shapes big enough for the thread-pool path and with
// channel counts that leave a ragged tail past the 16-lane blocks, outputs poisoned with NaN.
// (tests/models/gated_delta_op_test.cpp covers the delta rule itself and small conv shapes.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/gdn_simd.h"

namespace hearth {
namespace {

TEST(GdnSimd, Exp16MatchesStdExp) {
  // Decay masks see [-87, 0]; the SiLUs see the conv's and z's range, both signs.
  std::vector<float> xs;
  for (float x = -87.0f; x <= 88.0f; x += 0.01337f) xs.push_back(x);
  xs.push_back(0.0f);
  xs.resize((xs.size() + 15) / 16 * 16, 1.0f);
  for (size_t i = 0; i < xs.size(); i += 16) {
    const cpu::gdn::v16 y = cpu::gdn::exp16(cpu::gdn::load16(xs.data() + i));
    for (int l = 0; l < 16; ++l) {
      const float want = std::exp(xs[i + size_t(l)]);
      ASSERT_NEAR(y[l], want, 4e-7f * want) << "x = " << xs[i + size_t(l)];
    }
  }
  // Below the f32 range the kernels want exact zeros (flushed decays), not NaN or garbage.
  const cpu::gdn::v16 tiny = cpu::gdn::exp16(cpu::gdn::splat16(-1000.0f));
  for (int l = 0; l < 16; ++l) EXPECT_EQ(tiny[l], 0.0f);
}

// Direct conv over [state ‖ x] in float64, then SiLU.
std::vector<float> conv_reference(const std::vector<float>& st, const std::vector<float>& x,
                                  const std::vector<float>& w, int n, int C, int K) {
  std::vector<float> full(st);
  full.insert(full.end(), x.begin(), x.end());
  std::vector<float> y(size_t(n) * C);
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < K; ++j) s += double(w[size_t(j) * C + c]) * full[size_t(t + j) * C + c];
      y[size_t(t) * C + c] = float(s / (1.0 + std::exp(-s)));
    }
  return y;
}

TEST(GdnConv1d, ThreadedAndRaggedChannelsMatchFormula) {
  auto be = make_cpu_backend();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // n·C from below to well above the threading threshold; C % 16 != 0 in all but one.
  for (auto [n, C, K] : {std::tuple{3, 37, 4}, std::tuple{40, 1037, 4}, std::tuple{70, 1024, 4},
                         std::tuple{33, 2001, 3}}) {
    std::vector<float> x(size_t(n) * C), w(size_t(K) * C), st(size_t(K - 1) * C);
    for (auto& v : x) v = 2.0f * normal(rng);
    for (auto& v : w) v = normal(rng);
    for (auto& v : st) v = normal(rng);
    const std::vector<float> want = conv_reference(st, x, w, n, C, K);
    std::vector<float> y(size_t(n) * C, NAN);
    be->conv1d_causal_silu(
        Tensor(y.data(), DType::F32, {n, C}), Tensor(x.data(), DType::F32, {n, C}),
        Tensor(st.data(), DType::F32, {K - 1, C}), Tensor(w.data(), DType::F32, {K, C}));
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(y[i], want[i], 1e-5f * (1.0f + std::fabs(want[i])))
          << "n " << n << " C " << C << " at " << i;
    for (int r = 0; r < K - 1; ++r)
      for (int c = 0; c < C; ++c)
        ASSERT_EQ(st[size_t(r) * C + c], x[size_t(n - (K - 1) + r) * C + c]) << "state, C " << C;
  }
}

TEST(GdnRmsNormGated, ThreadedAndRaggedRowsMatchFormula) {
  auto be = make_cpu_backend();
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float eps = 1e-6f;
  // [n, heads, len]: small (serial), and large enough to be split over threads; len 40 and 7
  // leave tails past the 16-lane blocks.
  for (auto [n, heads, len] :
       {std::tuple{2, 3, 40}, std::tuple{64, 16, 128}, std::tuple{300, 16, 7}}) {
    const size_t total = size_t(n) * heads * len;
    std::vector<float> x(total), z(total), w(static_cast<size_t>(len)), y(total, NAN);
    for (auto& v : x) v = normal(rng);
    for (auto& v : z) v = 3.0f * normal(rng);
    for (auto& v : w) v = 1.0f + 0.1f * normal(rng);
    const Tensor shape_x(x.data(), DType::F32, {n, heads * len});
    be->rms_norm_gated(Tensor(y.data(), DType::F32, {n, heads * len}), shape_x,
                       Tensor(w.data(), DType::F32, {len}),
                       Tensor(z.data(), DType::F32, {n, heads * len}), eps);
    for (size_t r = 0; r < total / size_t(len); ++r) {
      double ss = 0;
      for (int i = 0; i < len; ++i) ss += double(x[r * len + size_t(i)]) * x[r * len + size_t(i)];
      const double inv = 1.0 / std::sqrt(ss / len + eps);
      for (int i = 0; i < len; ++i) {
        const size_t k = r * len + size_t(i);
        const double want = w[size_t(i)] * x[k] * inv * (z[k] / (1.0 + std::exp(-double(z[k]))));
        ASSERT_NEAR(y[k], want, 2e-6 * (1.0 + std::fabs(want))) << "len " << len << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace hearth
