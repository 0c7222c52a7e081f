// The CUDA backend's fused decode ops (linear_many, linear_glu, add_rms_norm,
// qk_norm_rope_store) against the CPU backend's composed forms, and pick_token against the host
// picker. Same error measure as cuda_ops_test.cpp: max |gpu - cpu| / (|cpu| + rms(cpu)), 1e-2
// for bf16 outputs; inputs are bf16-representable random values, outputs poisoned with NaN.
// Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/token_pick.h"
#include "core/dtype.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace hearth {
void cuda_backend_set_device_sampling(Backend& b, bool on);
namespace {

using test::kBf16Tol;
using test::randn;
using CudaFused = test::CudaTest;

TEST_F(CudaFused, LinearMany) {
  struct Case {
    int64_t n, in;
    std::vector<int64_t> outs;
    bool bias;
  };
  // Row counts small enough to split rows across warps, odd ones, and a wave-filling one.
  const std::vector<Case> cases = {{1, 1024, {2048, 1024, 1024}, false},
                                   {1, 4096, {17, 33, 4097}, true},
                                   {3, 2048, {512, 128, 128}, true},
                                   {8, 4096, {4096}, false},
                                   {5, 64, {7}, false}};
  uint32_t seed = 1;
  for (const auto& c : cases) {
    auto x = make({c.n, c.in}, randn(size_t(c.n * c.in), seed++));
    std::vector<Pair> ws, bs, ys;
    for (int64_t rows : c.outs) {
      ws.push_back(make({rows, c.in}, randn(size_t(rows * c.in), seed++, 0.05f)));
      bs.push_back(c.bias ? make({rows}, randn(size_t(rows), seed++)) : Pair());
      ys.push_back(out({c.n, rows}));
    }
    std::vector<Backend::LinearOut> g, h;
    for (size_t i = 0; i < c.outs.size(); ++i) {
      g.push_back({ys[i].g, ws[i].g, bs[i].g});
      h.push_back({ys[i].c, ws[i].c, bs[i].c});
    }
    gpu_->linear_many(x.g, g.data(), int(g.size()));
    cpu_->linear_many(x.c, h.data(), int(h.size()));
    for (size_t i = 0; i < c.outs.size(); ++i)
      expect_close(ys[i], kBf16Tol,
                   "linear_many n=" + std::to_string(c.n) + " in=" + std::to_string(c.in) +
                       " out=" + std::to_string(c.outs[i]));
  }
}

TEST_F(CudaFused, LinearGlu) {
  uint32_t seed = 50;
  for (Activation act : {Activation::Silu, Activation::GeluTanh, Activation::Gelu}) {
    for (int64_t n : {1, 5, 8}) {
      for (int64_t ff : {17, 3072}) {
        const int64_t in = 1024;
        auto x = make({n, in}, randn(size_t(n * in), seed++));
        auto wg = make({ff, in}, randn(size_t(ff * in), seed++, 0.05f));
        auto wu = make({ff, in}, randn(size_t(ff * in), seed++, 0.05f));
        auto bg = make({ff}, randn(size_t(ff), seed++));
        auto y = out({n, ff}), up = out({n, ff});
        gpu_->linear_glu(y.g, up.g, x.g, {y.g, wg.g, bg.g}, {up.g, wu.g, Tensor()}, act);
        cpu_->linear_glu(y.c, up.c, x.c, {y.c, wg.c, bg.c}, {up.c, wu.c, Tensor()}, act);
        expect_close(y, kBf16Tol,
                     "linear_glu act=" + std::to_string(int(act)) + " n=" + std::to_string(n) +
                         " ff=" + std::to_string(ff));
      }
    }
  }
}

TEST_F(CudaFused, AddRmsNorm) {
  uint32_t seed = 80;
  for (int64_t n : {1, 7}) {
    for (int64_t len : {1024, 2560, 4096}) {
      for (float offset : {0.0f, 1.0f}) {
        auto x = make({n, len}, randn(size_t(n * len), seed++));
        auto b = make({n, len}, randn(size_t(n * len), seed++));
        auto w = make({len}, randn(size_t(len), seed++, 0.1f), DType::F32);
        auto y = out({n, len});
        gpu_->add_rms_norm(y.g, x.g, b.g, 0.5f, w.g, 1e-6f, offset);
        cpu_->add_rms_norm(y.c, x.c, b.c, 0.5f, w.c, 1e-6f, offset);
        const std::string what =
            "add_rms_norm n=" + std::to_string(n) + " len=" + std::to_string(len);
        expect_close(x, kBf16Tol, what + " (sum)");
        expect_close(y, kBf16Tol, what);
      }
    }
  }
}

TEST_F(CudaFused, QkNormRopeStore) {
  struct Case {
    int64_t n, past, capacity;
    int heads, kv_heads, hd, rotary;
    bool norm;
  };
  const std::vector<Case> cases = {
      {1, 40, 64, 16, 8, 128, 128, true}, {17, 0, 32, 8, 2, 64, 64, true},  // ring wraps
      {1, 5, 16, 16, 4, 256, 64, true},   {3, 9, 16, 4, 2, 128, 64, false},
      {1, 0, 8, 4, 2, 128, 0, true},      {5, 3, 16, 4, 2, 80, 80, true}};  // 80: composed
  uint32_t seed = 120;
  for (const auto& c : cases) {
    const int64_t row = int64_t(c.kv_heads) * c.hd;
    auto q = make({c.n, c.heads, c.hd}, randn(size_t(c.n * c.heads * c.hd), seed++));
    auto k = make({c.n, c.kv_heads, c.hd}, randn(size_t(c.n * row), seed++));
    auto v = make({c.n, c.kv_heads, c.hd}, randn(size_t(c.n * row), seed++));
    auto qn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    auto kn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    auto kc = make({c.capacity, row}, randn(size_t(c.capacity * row), seed++));
    auto vc = make({c.capacity, row}, randn(size_t(c.capacity * row), seed++));
    std::vector<float> inv_freq(size_t(std::max(1, c.rotary / 2)));
    for (int i = 0; i < c.rotary / 2; ++i)
      inv_freq[size_t(i)] = std::pow(1e6f, -2.0f * float(i) / float(c.rotary));
    const RopeParams rp{inv_freq.data(), c.rotary, 1.0f};
    std::vector<int32_t> pos(size_t(c.n));
    for (int64_t i = 0; i < c.n; ++i) pos[size_t(i)] = int32_t(c.past + i);
    const int64_t end = c.past + c.n;
    const KvView gv{kc.g, vc.g, c.capacity, std::max<int64_t>(0, end - c.capacity), end};
    const KvView cv{kc.c, vc.c, c.capacity, gv.first, end};
    const Tensor none;
    gpu_->qk_norm_rope_store(q.g, k.g, v.g, c.norm ? qn.g : none, c.norm ? kn.g : none, 1e-6f, 0.0f,
                             c.rotary ? &rp : nullptr, gv, pos.data());
    cpu_->qk_norm_rope_store(q.c, k.c, v.c, c.norm ? qn.c : none, c.norm ? kn.c : none, 1e-6f, 0.0f,
                             c.rotary ? &rp : nullptr, cv, pos.data());
    const std::string what = "hd=" + std::to_string(c.hd) + " rotary=" + std::to_string(c.rotary);
    expect_close(q, kBf16Tol, "q " + what);
    expect_close(kc, kBf16Tol, "k cache " + what);
    expect_close(vc, kBf16Tol, "v cache " + what);
  }
}

TEST_F(CudaFused, PickTokenGreedy) {
  for (int64_t vocab : {17, 151936}) {
    auto l = make({vocab}, randn(size_t(vocab), uint32_t(vocab), 3.0f), DType::F32);
    // A planted tie at the maximum: the lower id wins, as on the host.
    std::vector<float> host = l.host;
    const float top = *std::max_element(host.begin(), host.end()) + 1.0f;
    host[size_t(vocab / 2)] = top;
    host[size_t(vocab / 3)] = top;
    auto t = make({vocab}, host, DType::F32);
    int32_t got = -1;
    gpu_->pick_token(&got, t.g, TokenPick{});
    EXPECT_EQ(got, int32_t(vocab / 3)) << "vocab " << vocab;
  }
}

// Sampling: sweep the draw u over a fine grid on both sides. The GPU visits survivors in
// another order than the host (so the token for one u differs), but every survivor's share
// of the grid is its probability on both: the frequencies must agree within the grid step.
TEST_F(CudaFused, PickTokenSamplingMatchesHostDistribution) {
  struct Case {
    int64_t vocab;
    TokenPick pick;
  };
  const std::vector<Case> cases = {
      {300, {0.7f, 0, 1.0f, 0.0f, 0.0}},   {300, {1.0f, 20, 1.0f, 0.0f, 0.0}},
      {300, {0.8f, 0, 0.9f, 0.0f, 0.0}},   {300, {1.0f, 40, 0.95f, 0.05f, 0.0}},
      {300, {1.5f, 0, 1.0f, 0.1f, 0.0}},   {151936, {0.6f, 20, 0.8f, 0.0f, 0.0}},
      {151936, {1.0f, 0, 0.7f, 0.0f, 0.0}}};
  const int steps = 2000;
  uint32_t seed = 300;
  // The backend samples on the host by default (the device picker serves greedy): opt in.
  cuda_backend_set_device_sampling(*gpu_, true);
  struct Restore {
    Backend* b;
    ~Restore() { cuda_backend_set_device_sampling(*b, false); }
  } restore{gpu_};
  for (const auto& c : cases) {
    auto l = make({c.vocab}, randn(size_t(c.vocab), seed++, 2.0f), DType::F32);
    std::map<int32_t, int> gpu_count, host_count;
    std::vector<std::pair<float, int32_t>> scratch;
    for (int i = 0; i < steps; ++i) {
      TokenPick p = c.pick;
      p.u = (i + 0.5) / steps;
      int32_t g = -1;
      gpu_->pick_token(&g, l.g, p);
      ++gpu_count[g];
      ++host_count[pick_token_host(l.host, p, scratch)];
    }
    const std::string what =
        "vocab " + std::to_string(c.vocab) + " T=" + std::to_string(c.pick.temperature) +
        " k=" + std::to_string(c.pick.top_k) + " p=" + std::to_string(c.pick.top_p) +
        " min_p=" + std::to_string(c.pick.min_p);
    // Each token owns an interval of the grid as long as its probability: ±1 step per side.
    std::map<int32_t, int> all = host_count;
    for (const auto& [tok, n] : gpu_count) all[tok] += 0;
    for (const auto& [tok, unused] : all) {
      const int g = gpu_count.count(tok) ? gpu_count[tok] : 0;
      const int h = host_count.count(tok) ? host_count[tok] : 0;
      EXPECT_LE(std::abs(g - h), 3) << what << ": token " << tok << " gpu " << g << " host " << h;
    }
  }
}

}  // namespace
}  // namespace hearth

#endif  // HEARTH_HAVE_CUDA
