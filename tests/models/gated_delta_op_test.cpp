// Op-level checks of the Gated DeltaNet CPU kernels on random inputs: the recurrence and the
// chunked (triangular-solve) form against a float64 recurrence, and against each other, over
// awkward sizes (1 token, chunk boundaries 63/64/65, several chunks, Dv not a multiple of the
// 32-column block, grouped value heads); the causal conv1d with carried state against a direct
// formula, fed in one call and split across calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace hearth {
namespace {

struct GdnCase {
  int n, hk, hv, dk, dv;
};

struct GdnInputs {
  std::vector<float> qkv, g, beta, state;
};

GdnInputs random_inputs(const GdnCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  GdnInputs in;
  const int row = 2 * c.hk * c.dk + c.hv * c.dv;
  in.qkv.resize(size_t(c.n) * row);
  for (auto& x : in.qkv) x = normal(rng);
  in.g.resize(size_t(c.n) * c.hv);
  in.beta.resize(in.g.size());
  for (size_t i = 0; i < in.g.size(); ++i) {
    // Decays from barely forgetting to forgetting everything, as trained models have.
    in.g[i] = -std::exp(-6.0f + 9.0f * uni(rng));
    in.beta[i] = 1.0f / (1.0f + std::exp(-normal(rng)));
  }
  in.state.resize(size_t(c.hv) * c.dk * c.dv);
  for (auto& x : in.state) x = 0.3f * normal(rng);
  return in;
}

// float64 recurrence straight from the definition (transformers' torch_recurrent_gated_delta_rule).
void reference(const GdnCase& c, const GdnInputs& in, std::vector<double>& out,
               std::vector<double>& S) {
  const int row = 2 * c.hk * c.dk + c.hv * c.dv, group = c.hv / c.hk;
  S.assign(in.state.begin(), in.state.end());
  out.assign(size_t(c.n) * c.hv * c.dv, 0.0);
  for (int t = 0; t < c.n; ++t)
    for (int h = 0; h < c.hv; ++h) {
      const int kh = h / group;
      const float* r = in.qkv.data() + size_t(t) * row;
      std::vector<double> q(size_t(c.dk)), k(size_t(c.dk));
      double sq = 0, sk = 0;
      for (int d = 0; d < c.dk; ++d) {
        q[size_t(d)] = r[kh * c.dk + d];
        k[size_t(d)] = r[c.hk * c.dk + kh * c.dk + d];
        sq += q[size_t(d)] * q[size_t(d)];
        sk += k[size_t(d)] * k[size_t(d)];
      }
      for (int d = 0; d < c.dk; ++d) {
        q[size_t(d)] /= std::sqrt(sq + 1e-6) * std::sqrt(double(c.dk));
        k[size_t(d)] /= std::sqrt(sk + 1e-6);
      }
      const float* v = r + 2 * c.hk * c.dk + h * c.dv;
      double* s = S.data() + size_t(h) * c.dk * c.dv;
      const double decay = std::exp(double(in.g[size_t(t) * c.hv + h]));
      const double b = in.beta[size_t(t) * c.hv + h];
      for (int j = 0; j < c.dv; ++j) {
        double mem = 0;
        for (int i = 0; i < c.dk; ++i) mem += (s[i * c.dv + j] *= decay) * k[size_t(i)];
        const double delta = b * (v[j] - mem);
        double o = 0;
        for (int i = 0; i < c.dk; ++i)
          o += (s[i * c.dv + j] += k[size_t(i)] * delta) * q[size_t(i)];
        out[(size_t(t) * c.hv + h) * c.dv + j] = o;
      }
    }
}

double rel_max_err(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::isnan(got[i]) ? INFINITY : std::fabs(got[i] - want[i]);
    err = std::max(err, e);
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

void run(Backend& be, const GdnCase& c, const GdnInputs& in, bool chunked, std::vector<float>& out,
         std::vector<float>& state, int calls = 1) {
  const int row = 2 * c.hk * c.dk + c.hv * c.dv;
  out.assign(size_t(c.n) * c.hv * c.dv, NAN);  // poison: every output must be written
  state = in.state;
  GatedDeltaParams p{c.hk, c.hv, c.dk, c.dv, chunked, 64};
  for (int k = 0; k < calls; ++k) {
    const int b = c.n * k / calls, e = c.n * (k + 1) / calls, m = e - b;
    if (m == 0) continue;
    auto* qkv = const_cast<float*>(in.qkv.data()) + size_t(b) * row;
    auto* g = const_cast<float*>(in.g.data()) + size_t(b) * c.hv;
    auto* beta = const_cast<float*>(in.beta.data()) + size_t(b) * c.hv;
    be.gated_delta(Tensor(out.data() + size_t(b) * c.hv * c.dv, DType::F32, {m, c.hv, c.dv}),
                   Tensor(qkv, DType::F32, {m, row}), Tensor(g, DType::F32, {m, c.hv}),
                   Tensor(beta, DType::F32, {m, c.hv}),
                   Tensor(state.data(), DType::F32, {c.hv, c.dk, c.dv}), p);
  }
}

class GatedDeltaOp : public ::testing::TestWithParam<GdnCase> {};

TEST_P(GatedDeltaOp, RecurrentAndChunkedMatchFloat64) {
  const GdnCase c = GetParam();
  auto be = make_cpu_backend();
  const GdnInputs in = random_inputs(c, uint32_t(c.n * 131 + c.dk * 7 + c.dv));
  std::vector<double> want_out, want_state;
  reference(c, in, want_out, want_state);
  std::vector<float> out_r, state_r, out_c, state_c, out_split, state_split;
  run(*be, c, in, false, out_r, state_r);
  run(*be, c, in, true, out_c, state_c);
  run(*be, c, in, true, out_split, state_split, 3);  // chunk boundaries restart per call
  EXPECT_LT(rel_max_err(out_r, want_out), 2e-5) << "recurrent output";
  EXPECT_LT(rel_max_err(state_r, want_state), 2e-5) << "recurrent state";
  EXPECT_LT(rel_max_err(out_c, want_out), 1e-4) << "chunked output";
  EXPECT_LT(rel_max_err(state_c, want_state), 1e-4) << "chunked state";
  EXPECT_LT(rel_max_err(out_split, want_out), 1e-4) << "chunked over 3 calls, output";
  EXPECT_LT(rel_max_err(state_split, want_state), 1e-4) << "chunked over 3 calls, state";
}

INSTANTIATE_TEST_SUITE_P(Sizes, GatedDeltaOp,
                         ::testing::Values(GdnCase{1, 2, 4, 16, 32}, GdnCase{17, 2, 4, 16, 32},
                                           GdnCase{63, 1, 1, 16, 24}, GdnCase{64, 2, 2, 32, 48},
                                           GdnCase{65, 2, 4, 16, 32}, GdnCase{200, 1, 2, 128, 128},
                                           GdnCase{130, 2, 2, 64, 40}),
                         [](const auto& info) {
                           const GdnCase& c = info.param;
                           return "n" + std::to_string(c.n) + "_hk" + std::to_string(c.hk) + "_hv" +
                                  std::to_string(c.hv) + "_dk" + std::to_string(c.dk) + "_dv" +
                                  std::to_string(c.dv);
                         });

TEST(Conv1dOp, CarriedStateEqualsOneCall) {
  auto be = make_cpu_backend();
  const int n = 11, C = 37, K = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(n) * C), w(size_t(K) * C), st0(size_t(K - 1) * C);
  for (auto& v : x) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  for (auto& v : st0) v = normal(rng);
  // Direct formula over [state ‖ x].
  std::vector<float> full(st0);
  full.insert(full.end(), x.begin(), x.end());
  std::vector<float> want(size_t(n) * C);
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < C; ++c) {
      double s = 0;
      for (int j = 0; j < K; ++j) s += double(w[size_t(j) * C + c]) * full[size_t(t + j) * C + c];
      want[size_t(t) * C + c] = float(s / (1.0 + std::exp(-s)));
    }
  for (int split : {n, 1, 2, 5}) {
    std::vector<float> st(st0), y(size_t(n) * C, NAN);
    for (int b = 0; b < n; b += split) {
      const int m = std::min(split, n - b);
      be->conv1d_causal_silu(Tensor(y.data() + size_t(b) * C, DType::F32, {m, C}),
                             Tensor(x.data() + size_t(b) * C, DType::F32, {m, C}),
                             Tensor(st.data(), DType::F32, {K - 1, C}),
                             Tensor(w.data(), DType::F32, {K, C}));
    }
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y[i], want[i], 1e-5) << "split " << split;
    for (int r = 0; r < K - 1; ++r)
      for (int c = 0; c < C; ++c)
        ASSERT_EQ(st[size_t(r) * C + c], x[size_t(n - (K - 1) + r) * C + c])
            << "state, split " << split;
  }
}

}  // namespace
}  // namespace hearth
