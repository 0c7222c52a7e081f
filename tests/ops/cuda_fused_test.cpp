// The CUDA backend's fused decode ops (linear_many and linear_glu with and without the input
// norm folded in, linear_residual, qk_norm_rope_store) against the CPU backend's composed forms,
// and pick_token against the host picker. Same error measure as cuda_ops_test.cpp: max |gpu - cpu|
// / (|cpu| + rms(cpu)), 1e-2 for bf16 outputs; inputs are bf16-representable random values, outputs
// poisoned with NaN. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/token_pick.h"
#include "core/dtype.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "paged_kv_test_util.h"

namespace hearth {
namespace {

using test::kBf16Tol;
using test::randn;

// The input norm's gain in a checkpoint dtype, with or without the gemma-style offset.
struct NormCase {
  bool on;
  DType gain_dtype;
  float offset;
};
const NormCase kNormCases[] = {
    {false, DType::F32, 0.0f}, {true, DType::F32, 0.0f}, {true, DType::BF16, 1.0f}};

// The CPU reference for a product of a normalised input: rms_norm into the scratch, rounded to
// bf16 as the GPU's activations are (the fused kernel stores the normalised row in bf16, as the
// composed GPU path would), so the comparison measures the product, not the input's rounding
// amplified through a GLU. Returns the input the CPU product should use.
Tensor cpu_normalised(Backend& cpu, auto& scratch, const Tensor& x, const Backend::InputNorm& n) {
  cpu.rms_norm(scratch.c, x, n.w, n.eps, n.offset);
  for (float& v : scratch.host) v = bf16_to_f32(f32_to_bf16(v));
  return scratch.c;
}

std::string norm_name(const NormCase& nc) {
  if (!nc.on) return " no-norm";
  return std::string(" norm(") + (nc.gain_dtype == DType::F32 ? "f32" : "bf16") + ", offset " +
         std::to_string(int(nc.offset)) + ")";
}

class CudaFused : public test::CudaTest {
 protected:
  // linear_many of x into ys on both backends, the GPU's by the weights `gpu_w` (ws's values,
  // prepared as the case needs), the input norm by `gain` when nc.on; every output checked.
  void expect_linear_many(const Pair& x, const Pair& gain, Pair& scratch, const NormCase& nc,
                          const std::vector<Tensor>& gpu_w, const std::vector<Pair>& ws,
                          const std::vector<Pair>& bs, std::vector<Pair>& ys,
                          const std::string& what) {
    std::vector<Backend::LinearOut> g, h;
    for (size_t i = 0; i < ys.size(); ++i) {
      g.push_back({ys[i].g, gpu_w[i], bs[i].g});
      h.push_back({ys[i].c, ws[i].c, bs[i].c});
    }
    const Backend::InputNorm gn{gain.g, 1e-6f, nc.offset, scratch.g};
    const Backend::InputNorm cn{gain.c, 1e-6f, nc.offset, scratch.c};
    gpu_->linear_many(x.g, g.data(), int(g.size()), nc.on ? &gn : nullptr);
    cpu_->linear_many(nc.on ? cpu_normalised(*cpu_, scratch, x.c, cn) : x.c, h.data(),
                      int(h.size()), nullptr);
    for (size_t i = 0; i < ys.size(); ++i)
      expect_close(ys[i], kBf16Tol,
                   what + " part " + std::to_string(i) + " out=" + std::to_string(ws[i].g.dim(0)) +
                       norm_name(nc));
  }
};

TEST_F(CudaFused, LinearMany) {
  struct Case {
    int64_t n, in;
    std::vector<int64_t> outs;
    bool bias;
  };
  // Row counts small enough to split rows across warps, odd ones, a wave-filling one, and an
  // input too large to normalise in shared memory (8 × 8192 × 2 bytes: the composed path).
  const std::vector<Case> cases = {{1, 1024, {2048, 1024, 1024}, false},
                                   {1, 4096, {17, 33, 4097}, true},
                                   {3, 2048, {512, 128, 128}, true},
                                   {8, 4096, {4096}, false},
                                   {5, 64, {7}, false},
                                   {8, 8192, {300}, false}};
  uint32_t seed = 1;
  for (const auto& c : cases) {
    for (const NormCase& nc : kNormCases) {
      auto x = make({c.n, c.in}, randn(size_t(c.n * c.in), seed++));
      auto gain = make({c.in}, randn(size_t(c.in), seed++, 0.1f), nc.gain_dtype);
      auto scratch = out({c.n, c.in});
      std::vector<Pair> ws, bs, ys;
      for (int64_t rows : c.outs) {
        ws.push_back(make({rows, c.in}, randn(size_t(rows * c.in), seed++, 0.05f)));
        bs.push_back(c.bias ? make({rows}, randn(size_t(rows), seed++)) : Pair());
        ys.push_back(out({c.n, rows}));
      }
      std::vector<Tensor> gpu_w;
      for (const Pair& w : ws) gpu_w.push_back(w.g);
      expect_linear_many(x, gain, scratch, nc, gpu_w, ws, bs, ys,
                         "linear_many n=" + std::to_string(c.n) + " in=" + std::to_string(c.in));
      expect_close(x, 1e-12, "linear_many leaves its input alone" + norm_name(nc));
    }
  }
}

TEST_F(CudaFused, LinearGlu) {
  uint32_t seed = 50;
  for (Activation act : {Activation::Silu, Activation::GeluTanh, Activation::Gelu}) {
    for (int64_t n : {1, 5, 8}) {
      for (int64_t ff : {17, 3072}) {
        for (const NormCase& nc : kNormCases) {
          const int64_t in = 1024;
          auto x = make({n, in}, randn(size_t(n * in), seed++));
          auto gain = make({in}, randn(size_t(in), seed++, 0.1f), nc.gain_dtype);
          auto scratch = out({n, in});
          auto wg = make({ff, in}, randn(size_t(ff * in), seed++, 0.05f));
          auto wu = make({ff, in}, randn(size_t(ff * in), seed++, 0.05f));
          auto bg = make({ff}, randn(size_t(ff), seed++));
          auto y = out({n, ff}), up = out({n, ff});
          const Backend::InputNorm gn{gain.g, 1e-6f, nc.offset, scratch.g};
          const Backend::InputNorm cn{gain.c, 1e-6f, nc.offset, scratch.c};
          gpu_->linear_glu(y.g, up.g, x.g, {y.g, wg.g, bg.g}, {up.g, wu.g, Tensor()}, act,
                           nc.on ? &gn : nullptr);
          cpu_->linear_glu(y.c, up.c, nc.on ? cpu_normalised(*cpu_, scratch, x.c, cn) : x.c,
                           {y.c, wg.c, bg.c}, {up.c, wu.c, Tensor()}, act, nullptr);
          expect_close(y, kBf16Tol,
                       "linear_glu act=" + std::to_string(int(act)) + " n=" + std::to_string(n) +
                           " ff=" + std::to_string(ff) + norm_name(nc));
        }
      }
    }
  }
}

// Host bf16 copies of matrices, as a checkpoint holds them, prepared together on the GPU.
struct StackedHost {
  std::vector<std::vector<uint16_t>> bits;
  std::vector<Tensor> host, gpu;
};
StackedHost prepare_stacked_on(Backend& gpu, const std::vector<const std::vector<float>*>& values,
                               const std::vector<int64_t>& rows, int64_t in) {
  StackedHost s;
  for (size_t i = 0; i < values.size(); ++i) {
    std::vector<uint16_t>& b = s.bits.emplace_back(values[i]->size());
    for (size_t j = 0; j < b.size(); ++j) b[j] = f32_to_bf16((*values[i])[j]);
  }
  for (size_t i = 0; i < values.size(); ++i)
    s.host.push_back(Tensor(s.bits[i].data(), DType::BF16, {rows[i], in}));
  s.gpu.resize(values.size());
  gpu.prepare_weights_stacked(s.host.data(), int(s.host.size()), s.gpu.data());
  return s;
}

// Products of more rows than the GEMV takes, by weights prepared as row ranges of one matrix
// (q|k|v|gate, the Gated DeltaNet's qkv|z|b|a, gate|up): one GEMM whose columns are split into
// the outputs (with their biases) or read as GLU halves; past kStackedRows (256) rows, as at
// 513 here, each product alone. Odd output widths, f32 outputs, biases and the input norm.
TEST_F(CudaFused, StackedProducts) {
  struct Case {
    int64_t n;
    std::vector<int64_t> outs;
    bool bias;
    DType y_dtype;
  };
  const int64_t in = 1024;
  const std::vector<Case> cases = {{9, {512, 128, 128, 512}, false, DType::BF16},
                                   {33, {17, 33, 1031}, true, DType::BF16},
                                   {64, {384, 256, 16, 16}, false, DType::F32},
                                   {200, {40, 24}, true, DType::F32},
                                   {513, {256, 64, 64}, true, DType::BF16}};
  uint32_t seed = 900;
  for (const auto& c : cases) {
    for (const NormCase& nc : {kNormCases[0], kNormCases[2]}) {
      auto x = make({c.n, in}, randn(size_t(c.n * in), seed++));
      auto gain = make({in}, randn(size_t(in), seed++, 0.1f), nc.gain_dtype);
      auto scratch = out({c.n, in});
      std::vector<Pair> ws, bs, ys;
      std::vector<const std::vector<float>*> values;
      for (int64_t rows : c.outs) {
        ws.push_back(make({rows, in}, randn(size_t(rows * in), seed++, 0.05f)));
        bs.push_back(c.bias ? make({rows}, randn(size_t(rows), seed++)) : Pair());
        ys.push_back(out({c.n, rows}, c.y_dtype));
      }
      for (const Pair& w : ws) values.push_back(&w.host);
      const StackedHost st = prepare_stacked_on(*gpu_, values, c.outs, in);
      for (size_t i = 1; i < c.outs.size(); ++i)  // one matrix, parts in order
        EXPECT_EQ(st.gpu[i].data,
                  static_cast<const char*>(st.gpu[i - 1].data) + st.gpu[i - 1].nbytes());
      expect_linear_many(x, gain, scratch, nc, st.gpu, ws, bs, ys,
                         "stacked linear_many n=" + std::to_string(c.n));
    }
  }
  for (int64_t n : {9, 64, 513}) {
    for (int64_t ff : {24, 3072}) {
      for (Activation act : {Activation::Silu, Activation::GeluTanh}) {
        auto x = make({n, in}, randn(size_t(n * in), seed++));
        auto wg = make({ff, in}, randn(size_t(ff * in), seed++, 0.05f));
        auto wu = make({ff, in}, randn(size_t(ff * in), seed++, 0.05f));
        const StackedHost st = prepare_stacked_on(*gpu_, {&wg.host, &wu.host}, {ff, ff}, in);
        auto y = out({n, ff}), up = out({n, ff});
        gpu_->linear_glu(y.g, up.g, x.g, {y.g, st.gpu[0], Tensor()}, {up.g, st.gpu[1], Tensor()},
                         act, nullptr);
        cpu_->linear_glu(y.c, up.c, x.c, {y.c, wg.c, Tensor()}, {up.c, wu.c, Tensor()}, act,
                         nullptr);
        expect_close(y, kBf16Tol,
                     "stacked linear_glu n=" + std::to_string(n) + " ff=" + std::to_string(ff) +
                         " act=" + std::to_string(int(act)));
      }
    }
  }
}

// x += (in · wᵀ + bias) * scale: the GEMV epilogue (n ≤ 8), the GEMM's accumulate (n > 8, no
// bias) and the composed form (n > 8 with a bias).
TEST_F(CudaFused, LinearResidual) {
  uint32_t seed = 80;
  for (int64_t n : {1, 7, 33}) {
    for (int64_t out_dim : {1024, 4096}) {
      for (bool bias : {false, true}) {
        const int64_t in = 2048;
        auto x = make({n, out_dim}, randn(size_t(n * out_dim), seed++));
        auto a = make({n, in}, randn(size_t(n * in), seed++));
        auto w = make({out_dim, in}, randn(size_t(out_dim * in), seed++, 0.05f));
        auto b = bias ? make({out_dim}, randn(size_t(out_dim), seed++)) : Pair();
        auto y = out({n, out_dim});
        gpu_->linear_residual(x.g, a.g, {y.g, w.g, b.g}, 0.5f);
        cpu_->linear_residual(x.c, a.c, {y.c, w.c, b.c}, 0.5f);
        expect_close(x, kBf16Tol,
                     "linear_residual n=" + std::to_string(n) + " out=" + std::to_string(out_dim) +
                         (bias ? " bias" : ""));
      }
    }
  }
}

// The attention input step into a paged cache: the step's attention layers share one block
// table (as a KvCache group's do), each storing at the same positions through its own offsets
// in the blocks, with its own q, k and v; every block is compared once all layers stored. Cases
// include batches across a block's edge and dropped positions (null table entries).
TEST_F(CudaFused, QkNormRopeStore) {
  struct Case {
    int64_t n, past, kept;  // kept > 0: positions below past + n - kept are dropped
    int heads, kv_heads, hd, rotary;
    bool norm;
    int layers;
  };
  const std::vector<Case> cases = {
      {1, 40, 64, 16, 8, 128, 128, true, 1},  {17, 0, 32, 8, 2, 64, 64, true, 2},
      {1, 5, 16, 16, 4, 256, 64, true, 3},    {3, 9, 16, 4, 2, 128, 64, false, 2},
      {1, 0, 8, 4, 2, 128, 0, true, 1},       {5, 3, 16, 4, 2, 80, 80, true, 2},  // 80: composed
      {17, 55, 0, 16, 8, 128, 128, true, 3},  {3, 126, 40, 8, 2, 128, 64, true, 2},
      {8, 2044, 100, 8, 2, 64, 64, false, 2}, {1, 191, 0, 4, 2, 80, 80, true, 4}};
  uint32_t seed = 120;
  for (const auto& c : cases) {
    const int64_t row = int64_t(c.kv_heads) * c.hd, end = c.past + c.n;
    test::PagedKv kv(*gpu_, *cpu_, row, c.layers, end,
                     c.kept ? std::max<int64_t>(0, end - c.kept) : 0, seed);
    auto qn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    auto kn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    std::vector<float> inv_freq(size_t(std::max(1, c.rotary / 2)));
    for (int i = 0; i < c.rotary / 2; ++i)
      inv_freq[size_t(i)] = std::pow(1e6f, -2.0f * float(i) / float(c.rotary));
    const RopeParams rp{inv_freq.data(), c.rotary, 1.0f};
    std::vector<int32_t> pos(size_t(c.n));
    for (int64_t i = 0; i < c.n; ++i) pos[size_t(i)] = int32_t(c.past + i);
    const Tensor none;
    const std::string what = "hd=" + std::to_string(c.hd) + " rotary=" + std::to_string(c.rotary) +
                             " past=" + std::to_string(c.past) + " n=" + std::to_string(c.n) +
                             " first=" + std::to_string(kv.first());
    for (int layer = 0; layer < c.layers; ++layer) {
      auto q = make({c.n, c.heads, c.hd}, randn(size_t(c.n * c.heads * c.hd), seed++));
      auto k = make({c.n, c.kv_heads, c.hd}, randn(size_t(c.n * row), seed++));
      auto v = make({c.n, c.kv_heads, c.hd}, randn(size_t(c.n * row), seed++));
      gpu_->qk_norm_rope_store(q.g, k.g, v.g, c.norm ? qn.g : none, c.norm ? kn.g : none, 1e-6f,
                               0.0f, c.rotary ? &rp : nullptr, kv.gv(layer), pos.data());
      cpu_->qk_norm_rope_store(q.c, k.c, v.c, c.norm ? qn.c : none, c.norm ? kn.c : none, 1e-6f,
                               0.0f, c.rotary ? &rp : nullptr, kv.cv(layer), pos.data());
      expect_close(q, kBf16Tol, "q of layer " + std::to_string(layer) + ", " + what);
    }
    kv.expect_close(kBf16Tol, "cache " + what);
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

// The multi-block argmax at its edges: the max in the very last element (the last block's
// tail, a partial group of 4 for odd sizes), the 248k Qwen3.5 vocabulary, a row of equal values
// (→ 0, the lowest id), rows with -inf entries (all -inf → 0, as on the host), and a row that
// starts off the 16-byte alignment (the scalar load path).
TEST_F(CudaFused, PickTokenGreedyEdges) {
  auto check = [&](const std::vector<float>& host, const std::string& what) {
    auto t = make({int64_t(host.size())}, host, DType::F32);
    int32_t got = -1;
    gpu_->pick_token(&got, t.g, TokenPick{});
    const auto want = int32_t(std::max_element(host.begin(), host.end()) - host.begin());
    EXPECT_EQ(got, want) << what;
  };
  uint32_t seed = 500;
  for (int64_t vocab : {1, 5, 17, 1001, 151936, 248320}) {
    std::vector<float> host = randn(size_t(vocab), seed++, 3.0f);
    check(host, "random, vocab " + std::to_string(vocab));
    host.back() = *std::max_element(host.begin(), host.end()) + 1.0f;
    check(host, "max last, vocab " + std::to_string(vocab));
  }
  check(std::vector<float>(151936, 1.5f), "all equal");
  check(std::vector<float>(248320, -INFINITY), "all -inf");
  {
    std::vector<float> host = randn(248320, seed++, 3.0f);
    for (size_t i = 0; i < host.size(); i += 3) host[i] = -INFINITY;
    host[200000] = 40.0f;
    check(host, "-inf entries");
    std::fill(host.begin(), host.end(), -INFINITY);
    host[host.size() - 2] = -7.0f;
    check(host, "one finite entry");
  }
  {
    const int64_t vocab = 1001;
    std::vector<float> all = randn(size_t(vocab + 1), seed++, 3.0f);
    all.back() = 50.0f;
    auto p = make({vocab + 1}, all, DType::F32);
    const Tensor view(static_cast<char*>(p.gbuf.data()) + 4, DType::F32, {vocab}, Device::CUDA);
    int32_t got = -1;
    gpu_->pick_token(&got, view, TokenPick{});
    EXPECT_EQ(got, int32_t(vocab - 1)) << "unaligned row";
  }
}

// The pick's kernels leave their scratch (arrival counter, histogram bins, phase state) clean
// for the next pick: greedy picks back to back, with sampled picks in between, stay right.
TEST_F(CudaFused, PickTokenRepeats) {
  const int64_t vocab = 151936;
  std::vector<float> a = randn(size_t(vocab), 900, 3.0f), b = randn(size_t(vocab), 901, 3.0f);
  a[size_t(vocab - 1)] = 30.0f;
  b[7] = 30.0f;
  auto ta = make({vocab}, a, DType::F32), tb = make({vocab}, b, DType::F32);
  auto tc = make({vocab}, randn(size_t(vocab), 902, 2.0f), DType::F32);
  std::vector<float> sorted = tc.host;
  std::nth_element(sorted.begin(), sorted.begin() + 39, sorted.end(), std::greater<float>());
  const float kth = sorted[39];  // the sampled token must be among the top 40
  int32_t first_sampled = -1;
  for (int round = 0; round < 3; ++round) {
    for (int rep = 0; rep < 2; ++rep) {
      int32_t got = -1;
      gpu_->pick_token(&got, ta.g, TokenPick{});
      EXPECT_EQ(got, int32_t(vocab - 1)) << "round " << round << " rep " << rep;
      gpu_->pick_token(&got, tb.g, TokenPick{});
      EXPECT_EQ(got, 7) << "round " << round << " rep " << rep;
    }
    // A sampled pick (every stage on) between the greedy ones; the same u repeats its token.
    TokenPick p{1.0f, 40, 0.9f, 0.01f, 0.37};
    int32_t s = -1;
    gpu_->pick_token(&s, tc.g, p);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, vocab);
    EXPECT_GE(tc.host[size_t(s)], kth) << "round " << round;
    if (round == 0) first_sampled = s;
    EXPECT_EQ(s, first_sampled) << "round " << round;
  }
}

// Sampling: sweep the draw u over a fine grid on both sides. The GPU visits survivors in
// another order than the host (so the token for one u differs), but every survivor's share
// of the grid is its probability on both: the frequencies must agree within the grid step.
void expect_host_distribution(Backend& gpu, const Tensor& g, const std::vector<float>& host,
                              const TokenPick& pick, const std::string& name) {
  const int steps = 2000;
  std::map<int32_t, int> gpu_count, host_count;
  std::vector<std::pair<float, int32_t>> scratch;
  for (int i = 0; i < steps; ++i) {
    TokenPick p = pick;
    p.u = (i + 0.5) / steps;
    int32_t got = -1;
    gpu.pick_token(&got, g, p);
    ++gpu_count[got];
    ++host_count[pick_token_host(host, p, scratch)];
  }
  const std::string what = name + " T=" + std::to_string(pick.temperature) +
                           " k=" + std::to_string(pick.top_k) + " p=" + std::to_string(pick.top_p) +
                           " min_p=" + std::to_string(pick.min_p);
  // Each token owns an interval of the grid as long as its probability: ±1 step per side.
  std::map<int32_t, int> all = host_count;
  for (const auto& [tok, n] : gpu_count) all[tok] += 0;
  for (const auto& [tok, unused] : all) {
    const int gc = gpu_count.count(tok) ? gpu_count[tok] : 0;
    const int hc = host_count.count(tok) ? host_count[tok] : 0;
    EXPECT_LE(std::abs(gc - hc), 3) << what << ": token " << tok << " gpu " << gc << " host " << hc;
  }
}

TEST_F(CudaFused, PickTokenSamplingMatchesHostDistribution) {
  struct Case {
    int64_t vocab;
    TokenPick pick;
  };
  const std::vector<Case> cases = {
      {300, {0.7f, 0, 1.0f, 0.0f, 0.0}},    {300, {1.0f, 20, 1.0f, 0.0f, 0.0}},
      {300, {0.8f, 0, 0.9f, 0.0f, 0.0}},    {300, {1.0f, 40, 0.95f, 0.05f, 0.0}},
      {300, {1.5f, 0, 1.0f, 0.1f, 0.0}},    {151936, {0.6f, 20, 0.8f, 0.0f, 0.0}},
      {151936, {1.0f, 0, 0.7f, 0.0f, 0.0}}, {248320, {0.8f, 50, 0.9f, 0.02f, 0.0}},
      {1001, {1.2f, 300, 0.95f, 0.0f, 0.0}}};
  uint32_t seed = 300;
  for (const auto& c : cases) {
    auto l = make({c.vocab}, randn(size_t(c.vocab), seed++, 2.0f), DType::F32);
    expect_host_distribution(*gpu_, l.g, l.host, c.pick, "vocab " + std::to_string(c.vocab));
  }
}

// Many exactly tied logits (values on a 0.5 grid), so the top-k and top-p thresholds fall inside
// a run of ties, which the device admits lowest id first like the host; plus -inf entries, which
// are never drawn.
TEST_F(CudaFused, PickTokenSamplingTiesAndInf) {
  const std::vector<TokenPick> picks = {{1.0f, 20, 1.0f, 0.0f, 0.0},
                                        {1.0f, 0, 0.85f, 0.0f, 0.0},
                                        {0.7f, 30, 0.9f, 0.05f, 0.0},
                                        {1.0f, 7, 0.6f, 0.0f, 0.0}};
  uint32_t seed = 700;
  for (int64_t vocab : {300, 151936}) {
    std::vector<float> host = randn(size_t(vocab), seed++, 1.5f);
    for (size_t i = 0; i < host.size(); ++i)
      host[i] = i % 7 == 3 ? -INFINITY : std::round(host[i] * 2.0f) / 2.0f;
    auto l = make({vocab}, host, DType::F32);
    for (const TokenPick& p : picks)
      expect_host_distribution(*gpu_, l.g, l.host, p, "ties, vocab " + std::to_string(vocab));
  }
}

}  // namespace
}  // namespace hearth

#endif  // HEARTH_HAVE_CUDA
