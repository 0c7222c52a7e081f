// The CUDA backend's ops for steps of several sequences (one decode row each, each row on its
// own cache or recurrent states) against the CPU backend row by row: paged caches of different
// lengths, some with dropped positions (null table entries), GQA groups 1 to 20 (the tensor-core
// rows kernel takes up to 16, the SIMT kernel the rest), head dims 64/80/128/256, sliding
// windows, softcaps, split-K lengths, both kernels; the Gated DeltaNet mixer; and pick_tokens
// against pick_token on each row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/attention.h"
#include "cuda_test_util.h"
#include "paged_kv_test_util.h"

namespace hearth::test {
namespace {

using CudaRows = CudaTest;

struct RowsCase {
  int n_head, n_head_kv, hd, window;
  float softcap;
  // (kept, positions already stored): a sequence's cache, of random contents, holds positions
  // [0, past + 1) (its row's position included) less those below past + 1 - kept, the blocks
  // wholly below first's block freed (kept: what a ring of that capacity held).
  std::vector<std::pair<int64_t, int64_t>> seqs;
};

const std::vector<RowsCase>& rows_cases() {
  static const std::vector<RowsCase> cases = {
      // Short and long caches side by side: the longest sets the split count, the others
      // leave their empty splits.
      {16, 8, 128, 0, 0.0f, {{256, 0}, {4096, 3000}, {512, 300}}},
      {8, 2, 64, 0, 0.0f, {{256, 17}, {256, 255}, {1024, 700}, {256, 5}, {2048, 2047}}},
      {16, 4, 256, 0, 0.0f, {{256, 100}, {512, 511}}},
      {8, 1, 128, 0, 0.0f, std::vector<std::pair<int64_t, int64_t>>(40, {256, 77})},  // many rows
      {8, 2, 80, 0, 0.0f, {{256, 3}, {256, 200}}},              // hd 80: no vec, no tensor cores
      {8, 8, 64, 64, 0.0f, {{128, 300}, {96, 90}, {128, 40}}},  // windows, dropped positions
      // Paged edges: first inside a block with 12 null entries below; first on a block's start
      // with a row that fills its block (end 128); end 64; a row that opens a block (end 193).
      {8, 2, 128, 128, 0.0f, {{200, 1000}, {64, 127}, {100, 63}, {129, 192}, {4096, 700}}},
      // A full 16-row tile (group 16); a group past it (20: the SIMT kernel); softcaps.
      {32, 2, 128, 0, 0.0f, {{1024, 1000}, {64, 30}, {300, 299}}},
      {40, 2, 64, 0, 0.0f, {{256, 130}, {700, 600}}},
      {16, 4, 128, 0, 30.0f, {{256, 200}, {2000, 1500}, {70, 69}}},
      {16, 2, 256, 100, 20.0f, {{256, 250}, {1000, 999}}},
      // One row over a long cache: 40 blocks of the tensor-core kernel, so a deep split-K.
      {32, 8, 128, 0, 0.0f, {{16384, 9000}}},
  };
  return cases;
}

TEST_F(CudaRows, AttentionInputAndAttentionEqualEachRowAlone) {
  struct Reset {
    ~Reset() { cuda::attention_set_kernel(cuda::AttentionKernel::Auto); }
  } reset;
  uint32_t seed = 900;
  for (const RowsCase& c : rows_cases()) {
    const int64_t n = int64_t(c.seqs.size()), row = int64_t(c.n_head_kv) * c.hd;
    // Sequence r's cache has 1 + r % 2 layers, its row's being the last (k_offset 0 and not).
    std::vector<PagedKv> seqs;
    std::vector<int32_t> pos;
    for (const auto& [kept, past] : c.seqs) {
      const int layers = 1 + int(seqs.size() % 2);
      seqs.emplace_back(*gpu_, *cpu_, row, layers, past + 1, std::max<int64_t>(0, past + 1 - kept),
                        seed);
      pos.push_back(int32_t(past));
    }
    std::vector<KvView> gv, cv;
    for (const PagedKv& s : seqs)
      gv.push_back(s.gv(s.layers() - 1)), cv.push_back(s.cv(s.layers() - 1));
    auto q = make({n, c.n_head, c.hd}, randn(size_t(n * c.n_head * c.hd), seed++));
    auto k = make({n, c.n_head_kv, c.hd}, randn(size_t(n * row), seed++));
    auto v = make({n, c.n_head_kv, c.hd}, randn(size_t(n * row), seed++));
    auto qn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    auto kn = make({c.hd}, randn(size_t(c.hd), seed++, 0.2f), DType::F32);
    const int rotary = c.hd == 80 ? 64 : c.hd;  // 80: the composed form (pairs across lanes)
    std::vector<float> inv_freq(size_t(rotary / 2));
    for (int i = 0; i < rotary / 2; ++i)
      inv_freq[size_t(i)] = std::pow(1e6f, -2.0f * float(i) / float(rotary));
    const RopeParams rp{inv_freq.data(), rotary, 1.0f};
    const std::string what = "heads " + std::to_string(c.n_head) + "/" +
                             std::to_string(c.n_head_kv) + " hd " + std::to_string(c.hd) +
                             " window " + std::to_string(c.window) + " rows " + std::to_string(n);

    gpu_->qk_norm_rope_store_rows(q.g, k.g, v.g, qn.g, kn.g, 1e-6f, 0.0f, &rp, gv.data(),
                                  pos.data());
    for (int64_t r = 0; r < n; ++r)
      cpu_->qk_norm_rope_store(q.c.slice_rows(r, r + 1), k.c.slice_rows(r, r + 1),
                               v.c.slice_rows(r, r + 1), qn.c, kn.c, 1e-6f, 0.0f, &rp,
                               cv[size_t(r)], pos.data() + r);
    expect_close(q, kBf16Tol, "q " + what);
    for (size_t s = 0; s < seqs.size(); ++s)
      seqs[s].expect_close(kBf16Tol, "cache of row " + std::to_string(s) + ", " + what);

    const AttentionParams p{c.n_head,  c.n_head_kv, c.hd, 1.0f / std::sqrt(float(c.hd)),
                            c.softcap, c.window};
    auto want = out({n, c.n_head, c.hd});
    for (int64_t r = 0; r < n; ++r)
      cpu_->attention(want.c.slice_rows(r, r + 1), q.c.slice_rows(r, r + 1), cv[size_t(r)],
                      pos.data() + r, p);
    for (auto kern : {cuda::AttentionKernel::Auto, cuda::AttentionKernel::Simt}) {
      cuda::attention_set_kernel(kern);
      // f32 outputs as well as bf16 ones (the backend's activations may be either).
      auto o = out({n, c.n_head, c.hd}, n % 2 ? DType::F32 : DType::BF16);
      gpu_->attention_rows(o.g, q.g, gv.data(), pos.data(), p);
      EXPECT_LT(rel_err(down(o.g), want.host), 1.5e-2)
          << "attention_rows " << what << " softcap " << c.softcap << " kernel " << int(kern);
    }
  }
}

// The Gated DeltaNet mixer over one token of each of several sequences (each its own conv and
// recurrent states) against the CPU's four ops row by row: the 9B's heads, small heads with a
// half slab, a shape the one-kernel path does not take (the rows then go one by one), and more
// rows than a grid's first dimension would hold for one.
TEST_F(CudaRows, GatedDeltaMixerRowsEqualEachRowAlone) {
  struct Shape {
    int hk, hv, dk, dv;
    int64_t rows;
  };
  const Shape shapes[] = {
      {16, 32, 128, 128, 5}, {2, 4, 32, 48, 3}, {1, 2, 24, 42, 4}, {2, 4, 16, 32, 70}};
  const DType F = DType::F32;
  uint32_t seed = 1300;
  for (const Shape& s : shapes) {
    const int64_t C = 2 * int64_t(s.hk) * s.dk + int64_t(s.hv) * s.dv, K = 4, n = s.rows;
    const int64_t vd = int64_t(s.hv) * s.dv;
    const std::string what = "mixer rows " + std::to_string(n) + " hk " + std::to_string(s.hk) +
                             " hv " + std::to_string(s.hv) + " dk " + std::to_string(s.dk) +
                             " dv " + std::to_string(s.dv);
    auto conv_w = make({K, C}, randn(size_t(K * C), seed++, 0.5f), F);
    auto a_log = make({s.hv}, randn(size_t(s.hv), seed++, 0.5f), F);
    auto dt_bias = make({s.hv}, randn(size_t(s.hv), seed++), F);
    auto norm_w = make({s.dv}, randn(size_t(s.dv), seed++), F);
    std::vector<Pair> conv_states, states;
    for (int64_t r = 0; r < n; ++r) {
      conv_states.push_back(make({K - 1, C}, randn(size_t((K - 1) * C), seed++), F));
      states.push_back(make({s.hv, s.dk, s.dv}, randn(size_t(vd) * s.dk, seed++, 0.1f), F));
    }
    auto qkv = make({n, C}, randn(size_t(n * C), seed++), F);
    auto a = make({n, s.hv}, randn(size_t(n) * s.hv, seed++), F);
    auto b = make({n, s.hv}, randn(size_t(n) * s.hv, seed++), F);
    auto z = make({n, vd}, randn(size_t(n * vd), seed++), F);
    auto normed = out({n, vd});
    auto conv = out({n, C}, F), g = out({n, s.hv}, F), beta = out({n, s.hv}, F);
    auto core = out({n, vd}, F);
    std::vector<Tensor> gconv, gstate;
    for (int64_t r = 0; r < n; ++r) {
      gconv.push_back(conv_states[size_t(r)].g);
      gstate.push_back(states[size_t(r)].g);
    }
    const GatedDeltaParams p{s.hk, s.hv, s.dk, s.dv, false, 64};
    gpu_->gated_delta_mixer_rows(normed.g, qkv.g, gconv.data(), conv_w.g, a.g, b.g, a_log.g,
                                 dt_bias.g, gstate.data(), p, norm_w.g, z.g, 1e-6f,
                                 {conv.g, g.g, beta.g, core.g});
    for (int64_t r = 0; r < n; ++r) {
      auto row = [r](const Pair& t) { return t.c.slice_rows(r, r + 1); };
      cpu_->conv1d_causal_silu(row(conv), row(qkv), conv_states[size_t(r)].c, conv_w.c);
      cpu_->gated_delta_gates(row(g), row(beta), row(a), row(b), a_log.c, dt_bias.c);
      cpu_->gated_delta(row(core), row(conv), row(g), row(beta), states[size_t(r)].c, p);
      cpu_->rms_norm_gated(row(normed), row(core), norm_w.c, row(z), 1e-6f);
    }
    EXPECT_LT(rel_err(down(normed.g), normed.host), kBf16Tol) << what << ": output";
    for (int64_t r = 0; r < n; ++r) {
      const std::string at = what + ", row " + std::to_string(r);
      EXPECT_LT(rel_err(down(conv_states[size_t(r)].g), conv_states[size_t(r)].host), kF32Tol)
          << at << ": conv state";
      EXPECT_LT(rel_err(down(states[size_t(r)].g), states[size_t(r)].host), kF32Tol)
          << at << ": recurrent state";
    }
  }
}

// One launch per kernel serves every row (a grid row each, its own scratch): rows of vocabularies
// not a multiple of 4, greedy and sampled rows mixed or all greedy, and more rows than SMs.
TEST_F(CudaRows, PickTokensEqualPickTokenOnEachRow) {
  struct Case {
    int64_t m, vocab;
    bool sampled;
  };
  for (const Case& c : {Case{7, 17, true}, Case{7, 151936, true}, Case{3, 1001, false},
                        Case{300, 4099, true}, Case{129, 151936, false}}) {
    const int64_t m = c.m, vocab = c.vocab;
    auto l = make({m, vocab}, randn(size_t(m * vocab), uint32_t(vocab + m) + 3, 3.0f), DType::F32);
    std::vector<TokenPick> picks(static_cast<size_t>(m));
    for (int64_t r = 0; r < m; ++r) {
      TokenPick& p = picks[size_t(r)];
      if (c.sampled && r % 2) {  // sampled rows between greedy ones
        p.temperature = 0.7f + 0.1f * float(r % 7);
        p.top_k = r % 3 == 0 ? 40 : 0;
        p.top_p = r % 5 == 0 ? 0.9f : 1.0f;
        p.min_p = r % 11 == 0 ? 0.05f : 0.0f;
        p.u = double(r % 13) / 13.0;
      }
    }
    std::vector<int32_t> got(size_t(m), -1);
    gpu_->pick_tokens(got.data(), l.g, picks.data());
    for (int64_t r = 0; r < m; ++r) {
      int32_t want = -1;
      gpu_->pick_token(&want, l.g.slice_rows(r, r + 1).reshaped({vocab}), picks[size_t(r)]);
      EXPECT_EQ(got[size_t(r)], want) << "row " << r << " of vocab " << vocab;
    }
  }
}

// Device memory given back by a buffer is its backend's to reuse (a request's KV caches come and
// go without cudaFree, which would wait for the device); buffers may outlive their backend.
TEST(CudaMemory, FreedBlocksAreReusedAndMayOutliveTheBackend) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto be = make_cuda_backend(0);
  void* first = nullptr;
  {
    DeviceBuffer a = be->alloc(size_t{1} << 20);
    first = a.data();
  }
  DeviceBuffer b = be->alloc((size_t{1} << 20) - 1000);  // a block up to 1/8 larger is taken
  EXPECT_EQ(b.data(), first);
  DeviceBuffer c = be->alloc(size_t{1} << 20);  // none free now: a new block
  EXPECT_NE(c.data(), first);
  DeviceBuffer d = be->alloc(size_t{1} << 19);  // 1 MiB blocks are too large for it
  EXPECT_NE(d.data(), first);
  { DeviceBuffer e = be->alloc(size_t{1} << 21); }
  // Blocks of an odd number of 2 MiB pages (KV blocks) are slots of one slab, side by side.
  const size_t odd = (size_t{9} << 20) + 4096;
  DeviceBuffer s1 = be->alloc(odd);
  DeviceBuffer s2 = be->alloc(odd);
  EXPECT_EQ(static_cast<char*>(s2.data()) - static_cast<char*>(s1.data()), std::ptrdiff_t(odd));
  s1 = DeviceBuffer();
  be.reset();  // the free blocks go back to the driver; b, c, d and s2 outlive the backend
  b = DeviceBuffer();
  c = DeviceBuffer();
  d = DeviceBuffer();
  s2 = DeviceBuffer();                // the slab's last slot in use: the slab goes back
  auto again = make_cuda_backend(0);  // the device is still in order
  DeviceBuffer f = again->alloc(64);
  std::vector<float> ones(16, 1.0f), back(16, 0.0f);
  const Tensor t(f.data(), DType::F32, {16}, Device::CUDA);
  again->copy_from_host(t, ones.data());
  again->to_host_f32(back.data(), t);
  EXPECT_EQ(back, ones);
}

}  // namespace
}  // namespace hearth::test

#endif  // HEARTH_HAVE_CUDA
