// Backend::decode_tail on the GPU (the one-kernel decode step's last three phases for one layer,
// decode_step.cu with StepArgs::tail; opt-in with HEARTH_DECODE_TAIL=1, which this suite sets
// for its own backend) against the CPU's ops with the GPU's rounding points:
//   x = bf16(x + bf16(o · in));  xn = bf16(rms_norm(x) · (w + offset));
//   h = bf16(act(gate · xn) · (up · xn));  x = bf16(x + bf16(down · h)).
// Shapes: the Qwen3.5-9B layer (in 4096 = 32 heads of 128), a 0.6B-sized one, and an odd one
// (in 192 = 3 heads of 64, 520 hidden units). Each runs three successive calls eagerly and as
// recorded steps (the first captured, the later ones replaying the graph, as decode does),
// with fresh inputs every call; the kernel must run every call. Same error measure as the
// other CUDA op tests, 1e-2 for bf16. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace hearth {
int64_t cuda_decode_tails_taken();
int64_t cuda_backend_graphs_replayed(const Backend& b);
int64_t cuda_backend_graphs_captured(const Backend& b);

namespace {

using test::kBf16Tol;
using test::randn;
using test::rel_err;

class CudaDecodeTail : public test::CudaTest {
 protected:
  // The backend reads its switch when it is made.
  static void SetUpTestSuite() {
    setenv("HEARTH_DECODE_TAIL", "1", 1);
    CudaTest::SetUpTestSuite();
    unsetenv("HEARTH_DECODE_TAIL");
  }

  struct Shape {
    int64_t H, n_in, I;
    DType gain_dt;
    float offset;
    Activation act;
  };

  static void round_bf16(std::vector<float>& v) {
    for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));
  }

  void calls(const Shape& s, bool graphs, uint32_t seed) {
    const std::string what = "H=" + std::to_string(s.H) + " in=" + std::to_string(s.n_in) +
                             " I=" + std::to_string(s.I) + (graphs ? " graphs" : " eager");
    auto o = make({s.H, s.n_in}, randn(size_t(s.H * s.n_in), seed + 1, 0.05f));
    auto gate = make({s.I, s.H}, randn(size_t(s.I * s.H), seed + 2, 0.05f));
    auto up = make({s.I, s.H}, randn(size_t(s.I * s.H), seed + 3, 0.05f));
    auto wd = make({s.H, s.I}, randn(size_t(s.H * s.I), seed + 4, 0.05f));
    auto gain = make({s.H}, randn(size_t(s.H), seed + 5, 0.2f), s.gain_dt);
    auto x = out({1, s.H}), in = out({1, s.n_in});
    // CPU scratch (f32): the products and the normalised input.
    std::vector<float> p(size_t(s.H)), xn(size_t(s.H)), g(size_t(s.I)), u(size_t(s.I));
    std::vector<float> h(size_t(s.I));
    const Tensor pc(p.data(), DType::F32, {1, s.H}), xnc(xn.data(), DType::F32, {1, s.H});
    const Tensor gc(g.data(), DType::F32, {1, s.I}), uc(u.data(), DType::F32, {1, s.I});
    const Tensor hc(h.data(), DType::F32, {1, s.I});
    const int64_t replayed = cuda_backend_graphs_replayed(*gpu_);
    const int64_t captured = cuda_backend_graphs_captured(*gpu_);
    constexpr int kCalls = 3;
    for (int call = 0; call < kCalls; ++call) {
      const uint32_t cs = seed + 100 * uint32_t(call + 1);
      // In place: the CPU tensors view these vectors.
      const std::vector<float> x0 = randn(size_t(s.H), cs), in0 = randn(size_t(s.n_in), cs + 1);
      std::copy(x0.begin(), x0.end(), x.host.begin());
      std::copy(in0.begin(), in0.end(), in.host.begin());
      upload(x.g, x.host);
      upload(in.g, in.host);
      const int64_t before = cuda_decode_tails_taken();
      if (graphs) gpu_->begin_step(1);
      const Backend::DecodeTail t{x.g,  in.g, o.g,   gain.g,   gate.g,
                                  up.g, wd.g, 1e-6f, s.offset, s.act};
      const bool taken = gpu_->decode_tail(t);
      if (graphs) gpu_->end_step();
      ASSERT_TRUE(taken) << what;
      EXPECT_EQ(cuda_decode_tails_taken() - before, 1) << what;
      // The reference, rounded where the kernel stores bf16.
      const Backend::LinearOut po{pc, o.c, Tensor()};
      cpu_->linear_many(in.c, &po, 1, nullptr);
      round_bf16(p);
      for (int64_t i = 0; i < s.H; ++i) x.host[size_t(i)] += p[size_t(i)];
      round_bf16(x.host);
      cpu_->rms_norm(xnc, x.c, gain.c, 1e-6f, s.offset);
      round_bf16(xn);
      const Backend::LinearOut gu[] = {{gc, gate.c, Tensor()}, {uc, up.c, Tensor()}};
      cpu_->linear_many(xnc, gu, 2, nullptr);
      cpu_->glu(hc, gc, uc, s.act);
      round_bf16(h);
      const Backend::LinearOut pd{pc, wd.c, Tensor()};
      cpu_->linear_many(hc, &pd, 1, nullptr);
      round_bf16(p);
      for (int64_t i = 0; i < s.H; ++i) x.host[size_t(i)] += p[size_t(i)];
      round_bf16(x.host);
      EXPECT_LT(rel_err(down(x.g), x.host), kBf16Tol) << what << " call " << call;
    }
    if (graphs) {
      EXPECT_EQ(cuda_backend_graphs_captured(*gpu_) - captured, 1) << what << ": captures";
      EXPECT_EQ(cuda_backend_graphs_replayed(*gpu_) - replayed, kCalls) << what << ": launches";
    }
  }
};

TEST_F(CudaDecodeTail, MatchesThreeOps) {
  const Shape shapes[] = {{4096, 4096, 12288, DType::BF16, 1.0f, Activation::Silu},
                          {1024, 2048, 3072, DType::F32, 0.0f, Activation::Silu},
                          {256, 192, 520, DType::F32, 0.0f, Activation::GeluTanh}};
  uint32_t seed = 7;
  for (const Shape& s : shapes) {
    calls(s, false, seed);
    calls(s, true, seed + 1000);
    seed += 10;
  }
}

// A shape the kernel does not take (the input not a whole number of 64-wide heads) is declined,
// so the model runs the three ops.
TEST_F(CudaDecodeTail, DeclinesWhatItCannotTake) {
  auto o = make({64, 100}, randn(64 * 100, 1, 0.05f));
  auto gate = make({32, 64}, randn(32 * 64, 2, 0.05f));
  auto up = make({32, 64}, randn(32 * 64, 3, 0.05f));
  auto wd = make({64, 32}, randn(64 * 32, 4, 0.05f));
  auto gain = make({64}, randn(64, 5), DType::F32);
  auto x = make({1, 64}, randn(64, 6)), in = make({1, 100}, randn(100, 7));
  const Backend::DecodeTail t{x.g,  in.g, o.g,   gain.g, gate.g,
                              up.g, wd.g, 1e-6f, 0.0f,   Activation::Silu};
  EXPECT_FALSE(gpu_->decode_tail(t));
}

}  // namespace
}  // namespace hearth

#else
TEST(CudaDecodeTail, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }
#endif
