// Block LDLQ for trellis coding (src/quant/ldlq.h): the block LDL factor against its defining
// property, the proxy loss on both axes, LDLQ against plain Viterbi under a correlated Hessian
// (it must be clearly lower) and under H = I (it must be the same codes), and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/ldlq.h"
#include "quant/trellis.h"
#include "quant/trellis_coder.h"
#include "recording_coder.h"

namespace hearth::quant {
namespace {

std::vector<float> normal(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// H = Σ x·xᵀ over `samples` inputs x that mostly live in a `rank`-dimensional subspace, with a
// small isotropic part: strongly correlated, as real layer inputs are.
std::vector<float> correlated_hessian(int64_t n, int64_t rank, int64_t samples, uint32_t seed) {
  const std::vector<float> basis = normal(size_t(rank * n), seed);
  const std::vector<float> coef = normal(size_t(samples * rank), seed + 1);
  const std::vector<float> noise = normal(size_t(samples * n), seed + 2, 0.05f);
  std::vector<double> x(static_cast<size_t>(n));
  std::vector<double> h(static_cast<size_t>(n * n), 0.0);
  for (int64_t s = 0; s < samples; ++s) {
    for (int64_t i = 0; i < n; ++i) {
      double v = noise[size_t(s * n + i)];
      for (int64_t r = 0; r < rank; ++r) v += coef[size_t(s * rank + r)] * basis[size_t(r * n + i)];
      x[size_t(i)] = v;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) h[size_t(i * n + j)] += x[size_t(i)] * x[size_t(j)];
  }
  return std::vector<float>(h.begin(), h.end());
}

std::vector<float> identity(int64_t n) {
  std::vector<float> h(static_cast<size_t>(n * n), 0.0f);
  for (int64_t i = 0; i < n; ++i) h[size_t(i * n + i)] = 1.0f;
  return h;
}

// decoded − w of a trellis module, stored layout.
std::vector<float> delta_of(const std::vector<float>& w, const std::vector<uint32_t>& codes,
                            const std::vector<uint16_t>& scales, int64_t rows, int64_t cols,
                            int k) {
  std::vector<float> d(w.size());
  dequantize_trellis_rows(codes.data(), scales.data(), rows, cols, k, d.data());
  for (size_t i = 0; i < d.size(); ++i) d[i] -= w[i];
  return d;
}

// s = L·D·Lᵀ with D block diagonal ⟺ X = L⁻¹·s is block upper triangular (X = D·Lᵀ).
void expect_block_ldl(int64_t n, int64_t block, ThreadPool* pool) {
  const std::vector<float> hf = correlated_hessian(n, 6, 40, 11);
  const std::vector<double> s = hessian_regularised(hf.data(), n, 1e-2, "test");
  const std::vector<float> l = block_ldl_lower(s.data(), n, block, pool);
  ASSERT_EQ(l.size(), size_t(n * n));
  std::vector<double> x(s);
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, s[size_t(i * n + i)]);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t own = i / block * block;
    for (int64_t m = 0; m < n; ++m) {
      const double want = m == i ? 1.0 : 0.0;
      if (m >= own) {
        EXPECT_EQ(l[size_t(i * n + m)], want) << i << "," << m;  // I, then zeros
      }
    }
    for (int64_t m = 0; m < own; ++m)
      for (int64_t c = 0; c < n; ++c)
        x[size_t(i * n + c)] -= l[size_t(i * n + m)] * x[size_t(m * n + c)];
  }
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t m = 0; m < i / block * block; ++m)
      worst = std::max(worst, std::abs(x[size_t(i * n + m)]) / scale);
  EXPECT_LT(worst, 1e-5) << "n " << n << " block " << block;
}

TEST(BlockLdl, FactorMakesTheRestBlockUpperTriangular) {
  ThreadPool pool(2);
  expect_block_ldl(48, 1, &pool);
  expect_block_ldl(48, 16, nullptr);
  expect_block_ldl(200, 8, &pool);  // several Cholesky panels, rows spread over threads
}

TEST(BlockLdl, NotPositiveDefiniteGivesEmpty) {
  std::vector<double> s = {1, 2, 2, 1};  // eigenvalues 3 and -1
  EXPECT_TRUE(block_ldl_lower(s.data(), 2, 1, nullptr).empty());
  EXPECT_THROW(block_ldl_lower(s.data(), 2, 3, nullptr), Error);
}

TEST(TrellisProxyLoss, AxesAgreeAndMatchDirectSum) {
  const int64_t out = 5, in = 7;
  const std::vector<float> d = normal(size_t(out * in), 3);  // ΔW [out, in]
  const std::vector<float> h = correlated_hessian(in, 3, 10, 4);
  double direct = 0;
  for (int64_t r = 0; r < out; ++r)
    for (int64_t a = 0; a < in; ++a)
      for (int64_t b = 0; b < in; ++b)
        direct += double(d[size_t(r * in + a)]) * h[size_t(a * in + b)] * d[size_t(r * in + b)];
  std::vector<float> dt(d.size());  // stored transposed for axis 0
  for (int64_t r = 0; r < out; ++r)
    for (int64_t a = 0; a < in; ++a) dt[size_t(a * out + r)] = d[size_t(r * in + a)];
  ThreadPool pool(2);
  EXPECT_NEAR(trellis_proxy_loss(d.data(), out, in, h.data(), 1, &pool), direct,
              1e-9 * std::abs(direct));
  EXPECT_NEAR(trellis_proxy_loss(dt.data(), in, out, h.data(), 0, nullptr), direct,
              1e-9 * std::abs(direct));
}

struct Coded {
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales;
  TrellisLdlqResult result;
};

Coded code_ldlq(const std::vector<float>& w, int64_t rows, int64_t cols, int k,
                const std::vector<float>& h, int axis, ThreadPool* pool) {
  Coded c;
  c.codes.resize(size_t(rows * TrellisSpec::row_words(cols, k)));
  c.scales.resize(size_t(rows));
  c.result = quantize_trellis_rows_ldlq(w.data(), rows, cols, k, h.data(), axis, c.codes.data(),
                                        c.scales.data(), pool);
  return c;
}

// Under a correlated H the feedback must pay: a clearly lower proxy loss than plain Viterbi,
// and the codes returned are the ones that loss was measured on.
void expect_ldlq_wins(int axis, int64_t rows, int64_t cols, int k) {
  const int64_t n = axis == 1 ? cols : rows;
  const std::vector<float> w = normal(size_t(rows * cols), 21, 0.02f);
  const std::vector<float> h = correlated_hessian(n, 24, 96, 5);
  ThreadPool pool(2);
  const Coded c = code_ldlq(w, rows, cols, k, h, axis, &pool);
  EXPECT_TRUE(c.result.used_ldlq);
  EXPECT_LT(c.result.proxy_ldlq, 0.7 * c.result.proxy_plain)
      << "axis " << axis << " k " << k << ": ldlq " << c.result.proxy_ldlq << " plain "
      << c.result.proxy_plain;
  const double got = trellis_proxy_loss(delta_of(w, c.codes, c.scales, rows, cols, k).data(), rows,
                                        cols, h.data(), axis, nullptr);
  EXPECT_NEAR(got, c.result.proxy_ldlq, 1e-9 * got);
}

TEST(TrellisLdlq, LowerProxyLossThanPlainViterbiOnCorrelatedHessian) {
  expect_ldlq_wins(1, 6, 768, 2);  // axis 1: feedback across three 256-column blocks
  expect_ldlq_wins(1, 4, 512, 3);
  expect_ldlq_wins(0, 96, 256, 2);  // axis 0: feedback across 96 stored rows
  expect_ldlq_wins(0, 40, 512, 4);
}

// H = I: L = I, no feedback, the same row scales: LDLQ codes are plain Viterbi's, bit for bit
// (proxy_ldlq is measured on the LDLQ codes, so equal losses mean the same decoded weights).
TEST(TrellisLdlq, IdentityHessianGivesPlainViterbi) {
  ThreadPool pool(2);
  for (int axis : {1, 0}) {
    const int64_t rows = 33, cols = 512, n = axis == 1 ? cols : rows;
    std::vector<float> w = normal(size_t(rows * cols), 8, 0.5f);
    for (int64_t c = 0; c < cols; ++c) w[size_t(5 * cols + c)] = 0.0f;  // a zero row too
    const Coded c = code_ldlq(w, rows, cols, 3, identity(n), axis, &pool);
    std::vector<uint32_t> plain(c.codes.size());
    std::vector<uint16_t> plain_scales(static_cast<size_t>(rows));
    quantize_trellis_rows(w.data(), rows, cols, 3, plain.data(), plain_scales.data(), &pool);
    EXPECT_EQ(c.result.proxy_ldlq, c.result.proxy_plain) << "axis " << axis;
    EXPECT_FALSE(c.result.used_ldlq);  // a tie keeps plain
    EXPECT_EQ(c.codes, plain);
    EXPECT_EQ(c.scales, plain_scales);
  }
}

using test::RecordingCoder;

// The coder a GPU run passes: LDLQ hands it the plain pass in one batch, then one batch per
// 256-column block (axis 1: every row's block j) or per stored row (axis 0), and the result is
// the CPU default's.
TEST(TrellisLdlq, BatchesGoToTheGivenCoder) {
  ThreadPool pool(2);
  for (int axis : {1, 0}) {
    const int64_t rows = axis == 1 ? 6 : 12, cols = 768, n = axis == 1 ? cols : rows;
    const std::vector<float> w = normal(size_t(rows * cols), 31, 0.02f);
    const std::vector<float> h = correlated_hessian(n, 8, 48, 6);
    const Coded want = code_ldlq(w, rows, cols, 2, h, axis, &pool);
    Coded got;
    got.codes.resize(want.codes.size());
    got.scales.resize(want.scales.size());
    RecordingCoder coder;
    got.result =
        quantize_trellis_rows_ldlq(w.data(), rows, cols, 2, h.data(), axis, got.codes.data(),
                                   got.scales.data(), &pool, nullptr, &coder);
    std::vector<int64_t> batches{rows * cols / 256};  // the plain pass
    batches.insert(batches.end(), size_t(axis == 1 ? cols / 256 : rows), axis == 1 ? rows : 3);
    EXPECT_EQ(coder.batches, batches) << "axis " << axis;
    EXPECT_TRUE(want.result.used_ldlq) << "axis " << axis;
    EXPECT_EQ(got.result.proxy_ldlq, want.result.proxy_ldlq) << "axis " << axis;
    EXPECT_EQ(got.codes, want.codes) << "axis " << axis;
    EXPECT_EQ(got.scales, want.scales) << "axis " << axis;
  }
}

TEST(TrellisLdlq, ZeroHessianKeepsPlainViterbi) {
  const int64_t rows = 4, cols = 256;
  const std::vector<float> w = normal(size_t(rows * cols), 9);
  const Coded c =
      code_ldlq(w, rows, cols, 2, std::vector<float>(size_t(cols * cols), 0.0f), 1, nullptr);
  EXPECT_FALSE(c.result.used_ldlq);
  EXPECT_EQ(c.result.proxy_plain, 0.0);
}

TEST(TrellisLdlq, ArgumentErrorsNameTheProblem) {
  const std::vector<float> w(256 * 2, 0.1f), h = identity(256);
  std::vector<uint32_t> codes(2 * 24);
  std::vector<uint16_t> scales(2);
  auto run = [&](int64_t cols, int axis, const float* hp, int k = 3) {
    quantize_trellis_rows_ldlq(w.data(), 2, cols, k, hp, axis, codes.data(), scales.data(),
                               nullptr);
  };
  EXPECT_THROW(run(256, 2, h.data()), Error);
  EXPECT_THROW(run(100, 1, h.data()), Error);
  EXPECT_THROW(run(256, 1, nullptr), Error);
  EXPECT_THROW(run(256, 1, h.data(), 5), Error);
  std::vector<float> bad = h;
  bad[7] = std::numeric_limits<float>::quiet_NaN();
  try {
    run(256, 1, bad.data());
    ADD_FAILURE() << "a NaN in H must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hearth::quant
