// The CUDA gated delta rule in its chunked form (GatedDeltaParams::chunked, the prefill path)
// against the CPU op in both forms: the chunked one with the same chunk size (the same
// algorithm, so the two should agree to f32 rounding) and the recurrent one (the definition;
// the chunked form differs from it by ~1e-6 of the output's scale on the CPU). Same error measure
// as cuda_ops_test.cpp: max |gpu - cpu| / (|cpu| + rms(cpu)), 1e-2 for bf16 outputs and 2e-3 for
// f32 outputs and the f32 state. Inputs are random bf16-representable values, never zeros; the
// outputs are poisoned with NaN first. Calls of up to 8 tokens take the recurrent kernel (decode
// sizes), so n = 1 checks that dispatch. Also gated_delta_mixer (the one-kernel decode mixer)
// against the CPU's four ops. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

#ifdef HEARTH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace hearth {
int64_t cuda_backend_graphs_replayed(const Backend& b);
int64_t cuda_backend_graphs_captured(const Backend& b);

namespace {

using test::kBf16Tol;
using test::kF32Tol;
using test::randn;
using test::rel_err;

struct GdnShape {
  int hk, hv, dk, dv;
  DType qkv_dt = DType::BF16;  // the model passes f32 q|k|v and output; bf16 is the other case
  DType out_dt = DType::BF16;
  float decay = 0.1f;  // scale of the log decays g: 0.1 keeps a long memory, 1 forgets fast
};

std::string describe(const GdnShape& s, int n, int chunk) {
  return "n=" + std::to_string(n) + " chunk=" + std::to_string(chunk) +
         " hk=" + std::to_string(s.hk) + " hv=" + std::to_string(s.hv) +
         " dk=" + std::to_string(s.dk) + " dv=" + std::to_string(s.dv) +
         (s.qkv_dt == DType::F32 ? " f32 qkv" : " bf16 qkv") +
         (s.out_dt == DType::F32 ? " f32 out" : " bf16 out") + " decay=" + std::to_string(s.decay);
}

// One decode call of gated_delta_mixer (conv → gates → delta rule → gated norm).
struct MixerShape {
  int hk, hv, dk, dv;
  DType out_dt = DType::BF16;  // normed, the out projection's input: bf16 in the GPU's model
  bool fused = true;           // the shape fits the one-kernel path (else the four ops run)
};

// Whether this device runs the one-kernel mixer at all: sm_90 (clusters), with the backend's
// default options.
bool mixer_on_device() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && prop.major >= 9;
}

class CudaGdn : public test::CudaTest {
 protected:
  // One sequence's delta-rule state: on the GPU and for the CPU's chunked form (one pair), and
  // for the CPU's recurrent form.
  struct Sequence {
    Pair state;
    std::vector<float> recurrent;
  };
  Sequence start(const GdnShape& s, float scale, uint32_t seed) {
    const size_t size = size_t(s.hv) * s.dk * s.dv;
    std::vector<float> init = scale > 0.0f ? randn(size, seed, scale) : std::vector<float>(size);
    Sequence q;
    q.state = make({s.hv, s.dk, s.dv}, init, DType::F32);
    q.recurrent = init;
    return q;
  }

  // n more tokens of the sequence through the GPU (chunked), the CPU chunked and the CPU
  // recurrent op; checks the GPU's output and updated state against both CPU forms.
  void step(Sequence& seq, const GdnShape& s, int n, int chunk, uint32_t seed) {
    const std::string what = describe(s, n, chunk);
    const int64_t row = int64_t(2 * s.hk) * s.dk + int64_t(s.hv) * s.dv;
    auto qkv = make({n, row}, randn(size_t(n * row), seed), s.qkv_dt);
    // g = -decay · softplus(x) < 0 and β = σ(x), as the gates op makes them.
    std::mt19937 rng(seed + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> g(size_t(n) * s.hv), beta(g.size());
    for (auto& x : g) x = bf16_to_f32(f32_to_bf16(-s.decay * std::log1p(std::exp(normal(rng)))));
    for (auto& x : beta) x = bf16_to_f32(f32_to_bf16(1.0f / (1.0f + std::exp(-normal(rng)))));
    auto gp = make({n, s.hv}, g, DType::F32);
    auto bp = make({n, s.hv}, beta, DType::F32);
    auto o = out({n, s.hv, s.dv}, s.out_dt);

    GatedDeltaParams p{s.hk, s.hv, s.dk, s.dv, true, chunk};
    gpu_->gated_delta(o.g, qkv.g, gp.g, bp.g, seq.state.g, p);
    cpu_->gated_delta(o.c, qkv.c, gp.c, bp.c, seq.state.c, p);
    std::vector<float> o_rec(size_t(n) * s.hv * s.dv, NAN);
    GatedDeltaParams pr = p;
    pr.chunked = false;
    cpu_->gated_delta(Tensor(o_rec.data(), DType::F32, {n, s.hv, s.dv}), qkv.c, gp.c, bp.c,
                      Tensor(seq.recurrent.data(), DType::F32, {s.hv, s.dk, s.dv}), pr);

    const double out_tol = s.out_dt == DType::F32 ? kF32Tol : kBf16Tol;
    const std::vector<float> got_out = down(o.g), got_state = down(seq.state.g);
    EXPECT_LT(rel_err(got_out, o.host), out_tol) << what << ": output vs CPU chunked";
    EXPECT_LT(rel_err(got_state, seq.state.host), kF32Tol) << what << ": state vs CPU chunked";
    EXPECT_LT(rel_err(got_out, o_rec), out_tol) << what << ": output vs CPU recurrent";
    EXPECT_LT(rel_err(got_state, seq.recurrent), kF32Tol) << what << ": state vs CPU recurrent";
  }

  // One call from a fresh (zero) or a random state.
  void one_call(const GdnShape& s, int n, int chunk, float state_scale, uint32_t seed) {
    Sequence seq = start(s, state_scale, seed * 7 + 3);
    step(seq, s, n, chunk, seed);
  }

  // `calls` successive calls of n tokens each on one sequence: the GPU's gated_delta_mixer
  // against the CPU's four ops (conv, gates, recurrent delta rule, gated norm) on the output and
  // both states, which each side carries from call to call. Both states start random (a
  // sequence under way). Every call refreshes the same input buffers and poisons the same
  // outputs, so with `graphs` (each call one recorded step) the first call is captured and the
  // later ones replay that graph, as decode does. Checks which path ran.
  void mixer_calls(const MixerShape& s, int n, int calls, bool graphs, uint32_t seed) {
    const int64_t C = 2 * int64_t(s.hk) * s.dk + int64_t(s.hv) * s.dv, K = 4;
    const int64_t vd = int64_t(s.hv) * s.dv;
    const std::string what = "mixer n=" + std::to_string(n) + " hk=" + std::to_string(s.hk) +
                             " hv=" + std::to_string(s.hv) + " dk=" + std::to_string(s.dk) +
                             " dv=" + std::to_string(s.dv) +
                             (s.out_dt == DType::F32 ? " f32 out" : " bf16 out") +
                             (graphs ? " graphs" : "");
    const DType F = DType::F32;
    auto conv_w = make({K, C}, randn(size_t(K * C), seed + 1, 0.5f), F);
    auto a_log = make({s.hv}, randn(size_t(s.hv), seed + 2, 0.5f), F);
    auto dt_bias = make({s.hv}, randn(size_t(s.hv), seed + 3), F);
    auto norm_w = make({s.dv}, randn(size_t(s.dv), seed + 4), F);
    auto conv_state = make({K - 1, C}, randn(size_t((K - 1) * C), seed + 5), F);
    auto state = make({s.hv, s.dk, s.dv}, randn(size_t(vd) * s.dk, seed + 6, 0.1f), F);
    auto qkv = out({n, C}, F), a = out({n, s.hv}, F), b = out({n, s.hv}, F), z = out({n, vd}, F);
    auto normed = out({n, vd}, s.out_dt);
    auto conv = out({n, C}, F), g = out({n, s.hv}, F), beta = out({n, s.hv}, F);
    auto core = out({n, vd}, F);
    // New values in place (the CPU tensors view p.host), on both sides.
    auto refill = [&](Pair& p, const std::vector<float>& v) {
      std::copy(v.begin(), v.end(), p.host.begin());
      upload(p.g, p.host);
    };
    const GatedDeltaParams p{s.hk, s.hv, s.dk, s.dv, false, 64};
    const bool fused = s.fused && n == 1 && mixer_on_device();
    const int64_t replayed = cuda_backend_graphs_replayed(*gpu_);
    const int64_t captured = cuda_backend_graphs_captured(*gpu_);
    for (int call = 0; call < calls; ++call) {
      const uint32_t cs = seed + 100 * uint32_t(call + 1);
      refill(qkv, randn(size_t(n * C), cs));
      refill(a, randn(size_t(n) * s.hv, cs + 1));
      refill(b, randn(size_t(n) * s.hv, cs + 2));
      refill(z, randn(size_t(n * vd), cs + 3));
      for (Pair* o : {&normed, &conv, &g, &beta, &core})
        refill(*o, std::vector<float>(o->host.size(), NAN));
      const int64_t before = cuda_gdn_mixer_fused();
      if (graphs) gpu_->begin_step(n);
      gpu_->gated_delta_mixer(normed.g, qkv.g, conv_state.g, conv_w.g, a.g, b.g, a_log.g, dt_bias.g,
                              state.g, p, norm_w.g, z.g, 1e-6f, {conv.g, g.g, beta.g, core.g});
      if (graphs) gpu_->end_step();
      EXPECT_EQ(cuda_gdn_mixer_fused() - before, fused ? 1 : 0) << what << ": fused path taken";
      // The reference: the CPU's four ops, one by one.
      cpu_->conv1d_causal_silu(conv.c, qkv.c, conv_state.c, conv_w.c);
      cpu_->gated_delta_gates(g.c, beta.c, a.c, b.c, a_log.c, dt_bias.c);
      cpu_->gated_delta(core.c, conv.c, g.c, beta.c, state.c, p);
      cpu_->rms_norm_gated(normed.c, core.c, norm_w.c, z.c, 1e-6f);
      const std::string at = what + " call " + std::to_string(call);
      const double tol = s.out_dt == DType::F32 ? kF32Tol : kBf16Tol;
      EXPECT_LT(rel_err(down(normed.g), normed.host), tol) << at << ": output";
      EXPECT_LT(rel_err(down(conv_state.g), conv_state.host), kF32Tol) << at << ": conv state";
      EXPECT_LT(rel_err(down(state.g), state.host), kF32Tol) << at << ": recurrent state";
    }
    if (graphs) {
      // Every recorded step launches its graph (the first right after capturing it); the
      // later calls record the same launches and only replay it.
      EXPECT_EQ(cuda_backend_graphs_captured(*gpu_) - captured, 1) << what << ": captures";
      EXPECT_EQ(cuda_backend_graphs_replayed(*gpu_) - replayed, calls) << what << ": launches";
    }
  }
};

// Small heads (Dv = 48: a full and a half 32-column slab), GQA 2 → 4, every chunk layout: a
// single token (recurrent kernel), a call shorter than a chunk, exactly one chunk, one chunk and
// one token, several chunks with a partial last one; chunks of 64 and 32.
TEST_F(CudaGdn, SmallHeads) {
  const GdnShape s{2, 4, 32, 48};
  uint32_t seed = 100;
  for (int chunk : {64, 32})
    for (int n : {1, 17, 64, 65, 200, 513}) one_call(s, n, chunk, 0.0f, seed++);
}

// The Qwen3.5 head size (Dk = Dv = 128) with the same token counts.
TEST_F(CudaGdn, Heads128) {
  const GdnShape s{2, 4, 128, 128};
  uint32_t seed = 200;
  for (int n : {1, 17, 64, 65, 200, 513}) one_call(s, n, 64, 0.0f, seed++);
  for (int n : {65, 200}) one_call(s, n, 32, 0.0f, seed++);
}

// The Qwen3.5-9B layer shape (16 key heads, 32 value heads of 128), f32 q|k|v and output as the
// model runs it, and the same with bf16.
TEST_F(CudaGdn, Qwen35Shape) {
  GdnShape s{16, 32, 128, 128, DType::F32, DType::F32};
  one_call(s, 513, 64, 0.0f, 300);
  s.qkv_dt = DType::BF16;
  s.out_dt = DType::BF16;
  one_call(s, 200, 32, 0.0f, 301);
}

// f32 in and out at the small shape, fast-forgetting gates (γ reaches about -50 within a chunk),
// chunk sizes that are not multiples of 16, and a key size that is not (Dk = 24: the recurrent
// kernel serves it).
TEST_F(CudaGdn, DtypesDecaysAndOddChunks) {
  one_call(GdnShape{2, 4, 32, 48, DType::F32, DType::F32}, 200, 64, 0.0f, 400);
  one_call(GdnShape{2, 4, 32, 48, DType::BF16, DType::BF16, 1.0f}, 200, 64, 0.0f, 401);
  one_call(GdnShape{2, 4, 128, 128, DType::BF16, DType::F32, 1.0f}, 130, 64, 0.0f, 402);
  one_call(GdnShape{2, 4, 32, 48}, 200, 63, 0.0f, 403);
  one_call(GdnShape{2, 4, 32, 48}, 100, 20, 0.0f, 404);
  one_call(GdnShape{1, 1, 48, 16}, 100, 64, 0.0f, 405);
  one_call(GdnShape{1, 2, 24, 40}, 100, 64, 0.0f, 406);
}

// A sequence continued: the state starts non-zero (an earlier prompt), then chunked calls of
// ragged lengths (chunks counted from each call's first token) with a decode-sized call between
// them, each checked, the state carried by each side.
TEST_F(CudaGdn, ContinuesFromState) {
  for (const GdnShape& s :
       {GdnShape{2, 4, 32, 48}, GdnShape{2, 4, 128, 128, DType::F32, DType::F32}}) {
    Sequence seq = start(s, 0.1f, 500);
    uint32_t seed = 510;
    for (int n : {100, 77, 3, 130}) step(seq, s, n, 64, seed++);
  }
}

// Three successive decode tokens through gated_delta_mixer: the 9B shape (16 key heads, 32 value
// heads, Dk = Dv = 128: clusters of 8) with bf16 and f32 output; the Qwen3.5 fixtures' heads
// (2 → 4 of 16 × 32); GQA ratio 1 (Dk = Dv = 64); a partial column slab (Dv = 48); ratio 4, and
// ratio 3 with Dk = 256 (clusters of 16 and 9, past the portable 8). Then the fallbacks, which
// run the four CUDA ops: Dv not a multiple of 4, and a 3-token call. Then three shapes again
// with every token a recorded step (graph capture, then replays, as in decode).
TEST_F(CudaGdn, MixerOneTokenMatchesFourOps) {
  const MixerShape shapes[] = {
      {16, 32, 128, 128}, {16, 32, 128, 128, DType::F32},    {2, 4, 16, 32},
      {4, 4, 64, 64},     {2, 4, 32, 48, DType::F32},        {2, 8, 128, 128},
      {1, 3, 256, 96},    {1, 2, 24, 42, DType::BF16, false}};
  uint32_t seed = 600;
  for (const MixerShape& s : shapes) mixer_calls(s, 1, 3, false, seed += 1000);
  mixer_calls(MixerShape{2, 4, 16, 32}, 3, 2, false, seed += 1000);
  // Decode's form: each token a recorded step, captured once and then replayed.
  for (const MixerShape& s : {shapes[0], shapes[2], shapes[5]})
    mixer_calls(s, 1, 3, true, seed += 1000);
}

}  // namespace
}  // namespace hearth

#else
TEST(CudaGdn, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }
#endif
