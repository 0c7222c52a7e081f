// The engine's loop on every fixture model: a request's greedy tokens are the same whether it
// runs alone or among 3, 8 or 17 requests of mixed prompt and output lengths arriving at
// different times (decode tokens and prompt chunks share steps), whether or not it shares a
// common prefix's KV blocks with others, and a request cancelled in its prompt or in its decode
// leaves without disturbing the others. Every test ends with every KV block given back.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "core/error.h"
#include "fixture.h"
#include "kv/kv_cache.h"
#include "models/llama.h"
#include "models/qwen3_5.h"
#include "runtime/engine.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace hearth {
namespace {

using test::FixtureCase;

std::vector<FixtureCase> all_cases() {
  std::vector<FixtureCase> cases;
  // Dynamic NTK rope recomputes its frequencies from each forward's length, as transformers
  // does, so where a prompt's chunks end changes the math there.
  for (auto& c : test::fixture_cases({}))
    if (c.name != "llama_rope_dynamic") cases.push_back(std::move(c));
  return cases;
}

// The bound two CPU runs of a request agree within (logits and the tie between the best two).
double cpu_tol(const FixtureCase& c) {
  return 1e-3 * std::max(1.0, c.reference["logits_std"].get<double>());
}

// Small prefill chunks and step budgets, so prompts take several steps and share them with
// decode tokens.
std::unique_ptr<Engine> make_engine(const FixtureCase& c, bool deterministic = false,
                                    const std::string& device = "cpu") {
  LoadOptions load;
  load.deterministic = deterministic;
  load.device = device;
  EngineOptions o;
  o.model_dir = c.dir;
  o.cache_bytes = 0;  // every request runs its whole prompt
  o.prefill_chunk = 8;
  o.max_step_tokens = 24;
  o.max_running = 20;
  return std::make_unique<Engine>(load_model(c.dir, load), nullptr, ModelConfig::load(c.dir), o);
}

// Request i: a prompt of 1 to 70 tokens made from the fixture's prompt, 3 to 10 greedy tokens,
// with each token's top-2 logprobs (to tell a rounding tie from a real difference).
GenerationRequest request(const FixtureCase& c, int i, int64_t n_vocab) {
  const auto base = c.reference["prompt"].get<std::vector<int32_t>>();
  GenerationRequest r;
  const size_t len = 1 + size_t(i * 37 % 70);
  for (size_t k = 0; k < len; ++k)
    r.prompt.push_back(
        int32_t((base[(k + size_t(i)) % base.size()] + i * (k / base.size())) % uint64_t(n_vocab)));
  r.max_tokens = 3 + i % 8;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  r.logprobs = 2;
  return r;
}

// The batched result agrees with the lone one: the same tokens, and the two best logprobs of
// each within `tol`, up to a point where the lone run's two best tokens were within `tol` of
// each other (a tie that rounding may break either way); there the comparison ends.
// Without logprobs in `batched` (its tokens picked by the backend), only the tokens compare.
// lp_tol (default tol) bounds the logprobs' differences where it differs from the tie bound.
void expect_same_tokens(const GenerationResult& alone, const GenerationResult& batched, double tol,
                        const std::string& what, double lp_tol = 0.0) {
  if (lp_tol <= 0.0) lp_tol = tol;
  ASSERT_EQ(batched.finish_reason, alone.finish_reason) << what << ": " << batched.error;
  ASSERT_EQ(batched.tokens.size(), alone.tokens.size()) << what;
  ASSERT_EQ(alone.logprobs.size(), alone.tokens.size()) << what;
  for (size_t k = 0; k < alone.tokens.size(); ++k) {
    const auto& top = alone.logprobs[k].top;
    const bool tie = top.size() == 2 && top[0].second - top[1].second < tol;
    if (batched.tokens[k] != alone.tokens[k]) {
      ASSERT_TRUE(tie) << what << ": token " << k << " is " << batched.tokens[k] << ", alone "
                       << alone.tokens[k];
      return;
    }
    if (tie) return;
    if (batched.logprobs.empty()) continue;
    // The chosen token's logprob is ~0 where it wins by far; the runner-up's shows a change.
    ASSERT_EQ(batched.logprobs[k].top.size(), top.size()) << what;
    for (size_t j = 0; j < top.size(); ++j)
      ASSERT_NEAR(batched.logprobs[k].top[j].second, top[j].second, lp_tol)
          << what << ": token " << k << ", logprob of its #" << j + 1;
  }
}

// The results of submitted requests, by slot. Callbacks run on the engine's worker.
class Results {
 public:
  explicit Results(size_t n) : got_(n) {}
  GenerationCallbacks callbacks(size_t slot) {
    GenerationCallbacks cb;
    cb.on_delta = [this, slot](const GenerationDelta&) {
      std::lock_guard lock(mu_);
      if (slot == 0) first_token_ = true;
      cv_.notify_all();
    };
    cb.on_done = [this, slot](const GenerationResult& r) {
      std::lock_guard lock(mu_);
      got_[slot] = r;
      ++finished_;
      cv_.notify_all();
    };
    return cb;
  }
  // Until slot 0 has a token or `n` requests have finished.
  void wait_first_token(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return first_token_ || finished_ >= n; });
  }
  const std::vector<GenerationResult>& wait_all() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return finished_ == got_.size(); });
    return got_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GenerationResult> got_;
  size_t finished_ = 0;
  bool first_token_ = false;
};

// Requests 0..n-1 of `make`: half submitted at once, the rest once the first has a token (they
// join a running batch). Returns their results.
std::vector<GenerationResult> run_staggered(Engine& engine, int n,
                                            const std::function<GenerationRequest(int)>& make) {
  Results results{static_cast<size_t>(n)};
  const int early = (n + 1) / 2;
  for (int i = 0; i < early; ++i) engine.submit(make(i), results.callbacks(size_t(i)));
  results.wait_first_token(size_t(early));
  for (int i = early; i < n; ++i) engine.submit(make(i), results.callbacks(size_t(i)));
  return results.wait_all();
}

class EngineBatch : public ::testing::TestWithParam<FixtureCase> {
 protected:
  void SetUp() override { blocks_at_start_ = KvCache::blocks_alive(); }
  // The engines are gone: finished, cancelled, preempted and cached states gave their blocks
  // back.
  void TearDown() override {
    EXPECT_EQ(KvCache::blocks_alive(), blocks_at_start_) << "KV blocks still held";
  }
  int64_t blocks_at_start_ = 0;
};

TEST_P(EngineBatch, EachRequestGetsItsLoneTokens) {
  const FixtureCase& c = GetParam();
  auto engine = make_engine(c);
  const int64_t n_vocab = engine->info().n_vocab;
  const double tol = cpu_tol(c);
  constexpr int kMost = 17;
  std::vector<GenerationResult> alone;
  for (int i = 0; i < kMost; ++i) alone.push_back(engine->generate(request(c, i, n_vocab)));

  for (int n : {1, 3, 8, 17}) {
    const auto got = run_staggered(*engine, n, [&](int i) { return request(c, i, n_vocab); });
    for (int i = 0; i < n; ++i)
      expect_same_tokens(
          alone[size_t(i)], got[size_t(i)], tol,
          c.name + " batch of " + std::to_string(n) + ", request " + std::to_string(i));
  }
}

// --deterministic (batch-invariant kernels): alone or among 3, 8 or 17 requests, with prompts
// chunked wherever the step budget falls, a request's tokens and logprobs are the same bits;
// sampled requests (seeded) draw the same tokens too.
void expect_deterministic(const FixtureCase& c, const std::string& device) {
  auto engine = make_engine(c, /*deterministic=*/true, device);
  const int64_t n_vocab = engine->info().n_vocab;
  auto make = [&](int i) {
    GenerationRequest r = request(c, i, n_vocab);
    if (i % 3 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.top_p = 0.9f;
      r.sampling.seed = uint64_t(100 + i);
    }
    return r;
  };
  constexpr int kMost = 17;
  std::vector<GenerationResult> alone;
  for (int i = 0; i < kMost; ++i) alone.push_back(engine->generate(make(i)));
  for (int n : {3, 8, 17}) {
    const auto got = run_staggered(*engine, n, make);
    for (int i = 0; i < n; ++i) {
      const std::string what = c.name + " on " + device + ", batch of " + std::to_string(n) +
                               ", request " + std::to_string(i);
      const GenerationResult &a = alone[size_t(i)], &b = got[size_t(i)];
      ASSERT_EQ(b.tokens, a.tokens) << what;
      ASSERT_EQ(b.logprobs.size(), a.logprobs.size()) << what;
      for (size_t k = 0; k < a.logprobs.size(); ++k) {
        ASSERT_EQ(b.logprobs[k].logprob, a.logprobs[k].logprob) << what << ", token " << k;
        ASSERT_EQ(b.logprobs[k].top, a.logprobs[k].top) << what << ", token " << k;
      }
    }
  }
}

TEST_P(EngineBatch, DeterministicIsBitIdenticalInAnyBatch) {
  expect_deterministic(GetParam(), "cpu");
}

TEST_P(EngineBatch, CancelledRequestsLeaveTheOthersAlone) {
  const FixtureCase& c = GetParam();
  if (c.model_type != "qwen3" && c.model_type != "qwen3_5") GTEST_SKIP() << "one per family";
  auto engine = make_engine(c);
  const int64_t n_vocab = engine->info().n_vocab;
  const double tol = cpu_tol(c);
  GenerationRequest keep = request(c, 5, n_vocab);
  keep.max_tokens = 12;
  const GenerationResult alone = engine->generate(keep);

  // Two requests to cancel: one with a long prompt, cancelled in its prefill when the other
  // has its first token; the other cancels itself at its third token.
  GenerationRequest in_prompt = request(c, 6, n_vocab), in_decode = request(c, 7, n_vocab);
  in_prompt.prompt.resize(200, 1);
  in_decode.max_tokens = 100;
  in_prompt.cancel = std::make_shared<std::atomic<bool>>(false);
  in_decode.cancel = std::make_shared<std::atomic<bool>>(false);
  Results results(3);
  GenerationCallbacks decode_cb = results.callbacks(1);
  decode_cb.on_delta = [tokens = 0, p = in_prompt.cancel,
                        d = in_decode.cancel](const GenerationDelta&) mutable {
    if (++tokens == 1) p->store(true);
    if (tokens == 3) d->store(true);
  };
  engine->submit(in_decode, std::move(decode_cb));
  engine->submit(in_prompt, results.callbacks(2));
  engine->submit(keep, results.callbacks(0));
  const auto& got = results.wait_all();
  EXPECT_EQ(KvCache::blocks_alive(), blocks_at_start_) << "the cancelled requests' blocks";
  expect_same_tokens(alone, got[0], tol, c.name + " kept request");
  EXPECT_EQ(got[1].finish_reason, "cancelled");
  EXPECT_LT(got[1].tokens.size(), 100u);
  EXPECT_EQ(got[2].finish_reason, "cancelled");
  EXPECT_TRUE(got[2].tokens.empty());
}

// A KV budget that holds one sequence of 512 positions and two of 256: four requests that grow past
// 256 positions cannot all keep their states, so the latest ones are preempted and recomputed, and
// still get their lone tokens.
TEST_P(EngineBatch, PreemptedRequestsGetTheirLoneTokens) {
  const FixtureCase& c = GetParam();
  if (c.model_type != "qwen3" && c.model_type != "qwen3_5") GTEST_SKIP() << "one per family";
  auto model = load_model(c.dir);
  const size_t fixed = model->new_sequence()->bytes();
  const size_t per_token = size_t(model->info().kv_bytes_per_token);
  auto state_bytes = [&](size_t positions) { return fixed + positions * per_token; };
  EngineOptions o;
  o.model_dir = c.dir;
  o.cache_bytes = 0;
  o.prefill_chunk = 32;
  o.max_step_tokens = 48;
  o.n_ctx = 512;
  o.kv_budget_bytes = state_bytes(512) + state_bytes(256) + state_bytes(256) / 2;
  Engine engine(std::move(model), nullptr, ModelConfig::load(c.dir), o);
  const int64_t n_vocab = engine.info().n_vocab;
  const double tol = cpu_tol(c);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) {
    GenerationRequest r = request(c, 3 * i + 1, n_vocab);
    r.prompt.resize(150 + 10 * size_t(i), int32_t(i + 1));
    r.max_tokens = 150;
    requests.push_back(r);
  }
  std::vector<GenerationResult> alone;
  for (const auto& r : requests) alone.push_back(engine.generate(r));
  EXPECT_EQ(engine.preemptions(), 0u);

  Results results(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) engine.submit(requests[i], results.callbacks(i));
  const auto& got = results.wait_all();
  EXPECT_GT(engine.preemptions(), 0u);
  for (size_t i = 0; i < requests.size(); ++i)
    expect_same_tokens(alone[i], got[i], tol, c.name + " request " + std::to_string(i));
}

// The prompt cache and the running requests share one pool (the KV budget): a cache filled by
// earlier requests gives way, oldest entry first, to requests that need the room, so the KV
// blocks alive never pass the budget, nothing is preempted, and the tokens are the lone ones.
TEST_P(EngineBatch, ThePromptCacheGivesWayToRunningRequests) {
  const FixtureCase& c = GetParam();
  if (c.model_type != "qwen3" && c.model_type != "qwen3_5") GTEST_SKIP() << "one per family";
  auto model = load_model(c.dir);
  const size_t fixed = model->new_sequence()->bytes();
  const auto per_token = size_t(model->info().kv_bytes_per_token);
  auto state_bytes = [&](size_t positions) { return fixed + positions * per_token; };
  EngineOptions o;
  o.model_dir = c.dir;
  o.prefill_chunk = 32;
  o.max_step_tokens = 48;
  o.n_ctx = 512;
  o.kv_budget_bytes = 2 * state_bytes(512) + state_bytes(64);
  Engine engine(std::move(model), nullptr, ModelConfig::load(c.dir), o);
  const int64_t n_vocab = engine.info().n_vocab;
  auto make = [&](int i, size_t prompt_len, int64_t max_tokens) {
    GenerationRequest r = request(c, 3 * i + 1, n_vocab);
    r.prompt.resize(prompt_len, int32_t(i + 1));
    r.max_tokens = max_tokens;
    return r;
  };
  // Four earlier requests leave their states (250 positions each) in the cache: about the budget.
  for (int i = 0; i < 4; ++i) engine.generate(make(i, 200, 50));
  ASSERT_GE(engine.cache_stats().entries, 3u) << c.name;

  // Two new ones grow to 450 positions each: together about the budget too.
  EngineOptions lone = o;
  lone.cache_bytes = 0;
  lone.kv_budget_bytes = 0;
  Engine reference(load_model(c.dir), nullptr, ModelConfig::load(c.dir), lone);
  std::vector<GenerationRequest> requests{make(4, 150, 300), make(5, 160, 290)};
  std::vector<GenerationResult> alone;
  for (const auto& r : requests) alone.push_back(reference.generate(r));
  const int64_t blocks_before = KvCache::blocks_alive();  // the reference holds none now
  const size_t block_bytes = size_t(KvCache::kBlockPositions) * per_token;
  std::atomic<int64_t> most_blocks{0};
  Results results(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationCallbacks cb = results.callbacks(i);
    cb.on_delta = [&, inner = cb.on_delta](const GenerationDelta& d) {
      int64_t now = KvCache::blocks_alive(), seen = most_blocks.load();
      while (now > seen && !most_blocks.compare_exchange_weak(seen, now)) {
      }
      inner(d);
    };
    engine.submit(requests[i], std::move(cb));
  }
  const auto& got = results.wait_all();
  const int64_t cached_blocks = blocks_before - blocks_at_start_;
  EXPECT_GT(size_t(cached_blocks) * block_bytes, state_bytes(512)) << c.name << ": a full cache";
  EXPECT_LE(size_t(most_blocks.load() - blocks_at_start_) * block_bytes, o.kv_budget_bytes)
      << c.name << ": KV blocks alive past the budget";
  EXPECT_EQ(engine.preemptions(), 0u) << c.name;
  for (size_t i = 0; i < requests.size(); ++i)
    expect_same_tokens(alone[i], got[i], cpu_tol(c), c.name + " request " + std::to_string(i));
}

// With the prompt cache on, requests with a common prefix reuse its state: a request's prompt
// state is cached when its prefill ends where states can be shared (paged caches, the CPU), and
// the later ones hold its KV blocks while they run, each copying a block before writing where
// another reads (a hybrid's recurrent state is copied, its snapshots shared); requests that
// arrive together wait for the first one's prefill. Their tokens are their lone ones (run with
// no cache).
// The check of PrefixSharingGivesTheLoneTokens on `device`: tokens as their lone runs' within
// tol (logprobs within lp_tol).
void check_prefix_sharing(const FixtureCase& c, const std::string& device, double tol,
                          double lp_tol) {
  auto plain = make_engine(c, false, device);
  const int64_t n_vocab = plain->info().n_vocab;
  // 8 requests: the same 100-token prefix (not a multiple of a block), then 0-20 tokens of their
  // own; request 0 is the prefix alone, so the others' tails begin within a shared block.
  auto make = [&](int i) {
    GenerationRequest r = request(c, 30, n_vocab);
    r.prompt.resize(100, 7);
    const GenerationRequest own = request(c, i, n_vocab);
    for (int k = 0; k < (i * 3) % 21; ++k)
      r.prompt.push_back(own.prompt[size_t(k) % own.prompt.size()]);
    r.max_tokens = 4 + i % 5;
    return r;
  };
  constexpr int kN = 8;
  std::vector<GenerationResult> alone;
  for (int i = 0; i < kN; ++i) alone.push_back(plain->generate(make(i)));
  plain.reset();

  LoadOptions load;
  load.device = device;
  EngineOptions o;
  o.model_dir = c.dir;
  o.cache_bytes = size_t(64) << 20;
  o.prefill_chunk = 8;
  o.max_step_tokens = 24;
  Engine shared(load_model(c.dir, load), nullptr, ModelConfig::load(c.dir), o);
  // Half the requests at once, the other half when the first has its first token: none has
  // finished, so the later ones reuse prompt states cached at the end of their prefill.
  const auto got = run_staggered(shared, kN, make);
  const std::string on = c.name + " on " + device;
  for (int i = 0; i < kN; ++i)
    expect_same_tokens(alone[size_t(i)], got[size_t(i)], tol,
                       on + ", sharing, request " + std::to_string(i), lp_tol);
  // Every later request reuses the prefix, but for a recurrent state the one whose prompt is the
  // prefix alone: its last token must run again, and the state cannot step back one token.
  const PromptCacheStats stats = shared.cache_stats();
  const auto model = load_model(c.dir, load);
  const auto state = model->new_sequence();
  EXPECT_TRUE(state->share()) << on << ": states share";
  const uint64_t hits = kN / 2 - (state->needs_checkpoints() ? 1 : 0);
  EXPECT_GE(stats.hits, hits) << on;
  EXPECT_GE(stats.reused_tokens, 64 * hits) << on;

  // All at once into an empty cache: the others wait for the first one's prefill rather than
  // computing the prefix beside it, and then reuse it.
  Engine burst(load_model(c.dir, load), nullptr, ModelConfig::load(c.dir), o);
  Results results{static_cast<size_t>(kN)};
  for (int i = 0; i < kN; ++i) burst.submit(make(i), results.callbacks(size_t(i)));
  const auto& together = results.wait_all();
  for (int i = 0; i < kN; ++i)
    expect_same_tokens(alone[size_t(i)], together[size_t(i)], tol,
                       on + ", submitted together, request " + std::to_string(i), lp_tol);
  const uint64_t waited = kN - 1 - (state->needs_checkpoints() ? 1 : 0);
  EXPECT_GE(burst.cache_stats().hits, waited) << on;
  EXPECT_GE(burst.cache_stats().reused_tokens, 64 * waited) << on;
}

TEST_P(EngineBatch, PrefixSharingGivesTheLoneTokens) {
  const FixtureCase& c = GetParam();
  const double tol = cpu_tol(c);
  check_prefix_sharing(c, "cpu", tol, tol);
}

// A recurrent state's prompt runs in chunks of the step's size and keeps its checkpoints inside
// them (checkpoint_interval 32 here): a 150-token prompt is one chunk, and a later prompt that
// shares its first 100 tokens resumes from the checkpoint at 96 kept inside that chunk, with the
// tokens it gets from a fresh engine.
TEST_P(EngineBatch, CheckpointsInsideAChunkServeLaterPrompts) {
  const FixtureCase& c = GetParam();
  if (!load_model(c.dir)->new_sequence()->needs_checkpoints())
    GTEST_SKIP() << c.name << ": attention-only states go back anywhere";
  auto fresh = make_engine(c);
  const int64_t n_vocab = fresh->info().n_vocab;
  EngineOptions o;
  o.model_dir = c.dir;
  o.cache_bytes = size_t(64) << 20;
  o.prefill_chunk = 256;
  o.max_step_tokens = 256;
  o.checkpoint_interval = 32;
  Engine engine(load_model(c.dir), nullptr, ModelConfig::load(c.dir), o);
  GenerationRequest first = request(c, 30, n_vocab);
  for (int64_t k = int64_t(first.prompt.size()); k < 150; ++k)
    first.prompt.push_back(int32_t((k * 13 + 5) % n_vocab));
  int chunks = 0;
  engine.generate(first, {}, [&](int64_t, int64_t) { ++chunks; });
  EXPECT_EQ(chunks, 1) << c.name << ": the prompt ran in one chunk";
  GenerationRequest second = request(c, 5, n_vocab);
  second.prompt.assign(first.prompt.begin(), first.prompt.begin() + 100);
  for (int k = 0; k < 20; ++k) second.prompt.push_back(int32_t((k * 29 + 11) % n_vocab));
  const GenerationResult resumed = engine.generate(second);
  EXPECT_EQ(resumed.usage.cached_tokens, 96) << c.name;
  expect_same_tokens(fresh->generate(second), resumed, cpu_tol(c), c.name + ", resumed at 96");
}

// A model whose forward_batch runs out of device memory once, at its `fail_at`-th call, after
// running the first half of the step's items (their states advanced, as a step cut short leaves
// them).
class RunsOutOfMemoryOnce final : public Model {
 public:
  RunsOutOfMemoryOnce(std::unique_ptr<Model> inner, int fail_at)
      : inner_(std::move(inner)), fail_at_(fail_at) {}
  const ModelInfo& info() const override { return inner_->info(); }
  std::unique_ptr<SequenceState> new_sequence() const override { return inner_->new_sequence(); }
  void forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
               float* logits) override {
    inner_->forward(state, tokens, rows, logits);
  }
  void forward_batch(std::span<const BatchItem> items) override {
    if (++calls_ != fail_at_) return inner_->forward_batch(items);
    inner_->forward_batch(items.first(items.size() / 2));
    throw OutOfMemory("out of device memory (a test's)");
  }
  int calls() const { return calls_; }

 private:
  std::unique_ptr<Model> inner_;
  int fail_at_;
  int calls_ = 0;
};

// A step that runs out of device memory preempts its requests (they recompute) and lowers the
// KV budget: every request still gets its lone tokens. A plain llama and a hybrid, whose
// recurrent states the cut-short step advanced.
TEST_P(EngineBatch, RunningOutOfMemoryPreemptsRatherThanFails) {
  const FixtureCase& c = GetParam();
  if (c.name != "llama" && c.name != "qwen3_5") GTEST_SKIP() << "llama and qwen3_5 only";
  auto plain = make_engine(c);
  const int64_t n_vocab = plain->info().n_vocab;
  const double tol = cpu_tol(c);
  constexpr int kN = 6;
  std::vector<GenerationResult> alone;
  for (int i = 0; i < kN; ++i) alone.push_back(plain->generate(request(c, i, n_vocab)));
  plain.reset();

  EngineOptions o;
  o.model_dir = c.dir;
  o.cache_bytes = 0;
  o.prefill_chunk = 8;
  o.max_step_tokens = 24;
  auto flaky = std::make_unique<RunsOutOfMemoryOnce>(load_model(c.dir), 4);
  const RunsOutOfMemoryOnce& model = *flaky;
  Engine engine(std::move(flaky), nullptr, ModelConfig::load(c.dir), o);
  const size_t budget = engine.kv_budget();
  const auto got = run_staggered(engine, kN, [&](int i) { return request(c, i, n_vocab); });
  ASSERT_GE(model.calls(), 4) << c.name;
  for (int i = 0; i < kN; ++i)
    expect_same_tokens(alone[size_t(i)], got[size_t(i)], tol,
                       c.name + " out of memory once, request " + std::to_string(i));
  EXPECT_GE(engine.preemptions(), 2u) << c.name;
  EXPECT_LT(engine.kv_budget(), budget) << c.name;
}

#ifdef HEARTH_HAVE_CUDA
bool runs_on_cuda(const FixtureCase& c) {
  std::vector<std::string> types = test::llama_fixture_types();
  for (const std::string& t : qwen3_5_model_types()) types.push_back(t);
  return std::find(types.begin(), types.end(), c.model_type) != types.end();
}

// On a GPU the rows of a step run together too (one launch per op for every sequence, their
// caches passed as a table) and requests without logprobs get their tokens picked on the device.
// Each request's tokens equal its lone run's, up to a near tie: bf16 activations round
// differently in a product of more rows (and prompts are chunked elsewhere), so a tie is the
// CUDA fixtures' greedy bound (0.1 · logits_std). A logprob is a difference of two logits, each
// within 5e-2 · logits_std of the f32 reference in either run: they may differ by 0.2 · std.
TEST_P(EngineBatch, OnCudaEachRequestGetsItsLoneTokens) {
  const FixtureCase& c = GetParam();
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!runs_on_cuda(c)) GTEST_SKIP() << c.model_type << " does not run on CUDA";
  auto engine = make_engine(c, false, "cuda");
  const int64_t n_vocab = engine->info().n_vocab;
  const double tol = 0.1 * c.reference["logits_std"].get<double>();
  constexpr int kMost = 17;
  std::vector<GenerationResult> alone;
  for (int i = 0; i < kMost; ++i) alone.push_back(engine->generate(request(c, i, n_vocab)));
  for (bool device_picks : {false, true}) {
    for (int n : {3, 8, 17}) {
      const auto got = run_staggered(*engine, n, [&](int i) {
        GenerationRequest r = request(c, i, n_vocab);
        if (device_picks) r.logprobs = -1;
        return r;
      });
      for (int i = 0; i < n; ++i)
        expect_same_tokens(alone[size_t(i)], got[size_t(i)], tol,
                           c.name + " on CUDA, batch of " + std::to_string(n) + ", request " +
                               std::to_string(i) + (device_picks ? ", picked on the device" : ""),
                           2 * tol);
    }
  }
}

// --deterministic on the GPU: every product through one fixed-order kernel, every query row through
// the rows attention kernel with splits of a fixed length, the Gated DeltaNet through its
// recurrence: the same bits alone and in any batch.
TEST_P(EngineBatch, OnCudaDeterministicIsBitIdenticalInAnyBatch) {
  const FixtureCase& c = GetParam();
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!runs_on_cuda(c)) GTEST_SKIP() << c.model_type << " does not run on CUDA";
  expect_deterministic(c, "cuda");
}

// Prefix sharing on the GPU: the caches share KV blocks there too (copy on write on the device),
// with the batched-CUDA bounds of OnCudaEachRequestGetsItsLoneTokens.
TEST_P(EngineBatch, OnCudaPrefixSharingGivesTheLoneTokens) {
  const FixtureCase& c = GetParam();
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!runs_on_cuda(c)) GTEST_SKIP() << c.model_type << " does not run on CUDA";
  const double tol = 0.1 * c.reference["logits_std"].get<double>();
  check_prefix_sharing(c, "cuda", tol, 2 * tol);
}
#endif

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineBatch, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace hearth
