// Engine tests on the random-weight qwen3 with the real Qwen3 tokenizer: prompt-cache reuse gives
// the same tokens as a fresh prefill and reports cached_tokens; streaming deltas add up to the
// text; cancellation, FIFO order, context limits and logprobs; a tensor-parallel split.
#include "runtime/engine.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "test_model.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

// Made once per test process in a temp dir, removed at exit.
struct TempModel {
  std::filesystem::path dir;
  ~TempModel() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::filesystem::path& model_dir() {
  static const TempModel model{
      testing::make_random_qwen3(std::filesystem::temp_directory_path() /
                                 ("hearth-test-qwen3-" + std::to_string(::getpid())))};
  return model.dir;
}

std::unique_ptr<Engine> load_engine(size_t cache_bytes = size_t{256} << 20, int64_t n_ctx = 0,
                                    int tensor_parallel = 1) {
  EngineOptions o;
  o.model_dir = model_dir().string();
  o.cache_bytes = cache_bytes;
  o.n_ctx = n_ctx;
  o.tensor_parallel = tensor_parallel;
  return Engine::load(o);
}

using testing::greedy;

std::vector<int32_t> encode(const Engine& e, const std::string& text) {
  return e.tokenizer()->encode(text, false);
}

TEST(Engine, PromptCacheReusesPrefixAndMatchesFreshPrefill) {
  auto cached = load_engine();
  auto fresh = load_engine(0);
  const auto p1 =
      encode(*cached,
             "The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away,");
  auto a = cached->generate(greedy(p1, 12));
  EXPECT_EQ(a.usage.cached_tokens, 0);
  EXPECT_EQ(a.usage.prompt_tokens, int64_t(p1.size()));
  auto b = cached->generate(greedy(p1, 12));
  EXPECT_EQ(b.usage.cached_tokens, int64_t(p1.size()) - 1);  // the last token always runs
  EXPECT_EQ(a.tokens, b.tokens);

  // A second turn: the first prompt, its answer and more text share a long prefix.
  std::vector<int32_t> p2 = p1;
  p2.insert(p2.end(), a.tokens.begin(), a.tokens.end());
  auto more = encode(*cached, " and then the story went on.");
  p2.insert(p2.end(), more.begin(), more.end());
  auto c = cached->generate(greedy(p2, 12));
  EXPECT_GE(c.usage.cached_tokens, int64_t(p1.size()));
  auto d = fresh->generate(greedy(p2, 12));
  EXPECT_EQ(d.usage.cached_tokens, 0);
  EXPECT_EQ(c.tokens, d.tokens);
  EXPECT_EQ(c.text, d.text);
  EXPECT_GE(cached->cache_stats().hits, 2u);
}

TEST(Engine, StreamedDeltasConcatenateToText) {
  auto e = load_engine();
  std::string streamed;
  size_t n_tokens = 0;
  auto r =
      e->generate(greedy(encode(*e, "Hello there, how are"), 20), [&](const GenerationDelta& d) {
        streamed += d.text;
        n_tokens += d.tokens.size();
      });
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(streamed, r.text);
  EXPECT_EQ(n_tokens, r.tokens.size());
  EXPECT_EQ(r.usage.completion_tokens, 20);
  EXPECT_EQ(r.text, e->tokenizer()->decode(r.tokens, true));
}

TEST(Engine, CancelStopsBetweenTokens) {
  auto e = load_engine();
  auto req = greedy(encode(*e, "Count forever:"), 200);
  req.cancel = std::make_shared<std::atomic<bool>>(false);
  auto flag = req.cancel;
  int deltas = 0;
  auto r = e->generate(std::move(req), [&](const GenerationDelta&) {
    if (++deltas == 3) flag->store(true);
  });
  EXPECT_EQ(r.finish_reason, "cancelled");
  EXPECT_LT(r.tokens.size(), 10u);
}

TEST(Engine, QueueIsFifoAndEveryRequestCompletes) {
  auto e = load_engine();
  std::mutex mu;
  std::vector<int> order;
  std::condition_variable cv;
  for (int i = 0; i < 6; ++i) {
    GenerationCallbacks cb;
    cb.on_done = [&, i](const GenerationResult& r) {
      EXPECT_EQ(r.finish_reason, "length");
      std::lock_guard lock(mu);
      order.push_back(i);
      cv.notify_all();
    };
    e->submit(greedy(encode(*e, "Request number " + std::to_string(i)), 4), cb);
  }
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return order.size() == 6; });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Engine, ShutdownFailsQueuedRequests) {
  auto e = load_engine();
  std::atomic<int> errors{0}, done{0};
  for (int i = 0; i < 4; ++i) {
    GenerationCallbacks cb;
    cb.on_done = [&](const GenerationResult& r) {
      if (r.finish_reason == "error" || r.finish_reason == "cancelled") ++errors;
      ++done;
    };
    e->submit(greedy(encode(*e, "Long request"), 2000), cb);
  }
  e->shutdown();
  EXPECT_EQ(done.load(), 4);
  EXPECT_EQ(errors.load(), 4);
  GenerationCallbacks cb;
  std::string after;
  cb.on_done = [&](const GenerationResult& r) { after = r.error; };
  e->submit(greedy({1, 2}, 1), cb);
  EXPECT_NE(after.find("shutting down"), std::string::npos);
}

// EngineOptions::tensor_parallel: the model split over 2 ranks writes the whole model's text,
// through the prompt cache too.
TEST(Engine, TensorParallelWritesTheSameText) {
  auto whole = load_engine();
  auto split = load_engine(size_t{256} << 20, 0, 2);
  EXPECT_NE(split->info().architecture.find("tensor parallel 2"), std::string::npos);
  const auto prompt = encode(*whole, "The quick brown fox jumps over the lazy dog. Then");
  const auto want = whole->generate(greedy(prompt, 16));
  for (int pass = 0; pass < 2; ++pass) {
    const auto got = split->generate(greedy(prompt, 16));
    EXPECT_EQ(got.tokens, want.tokens) << "pass " << pass;
    EXPECT_EQ(got.text, want.text) << "pass " << pass;
  }
  EXPECT_GE(split->cache_stats().hits, 1u);
}

TEST(Engine, ValidateNamesTheNumbers) {
  auto e = load_engine(0, 64);
  auto r = greedy(std::vector<int32_t>(40, 100), 30);
  try {
    e->validate(r);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("64"), std::string::npos) << m;
    EXPECT_NE(m.find("40"), std::string::npos) << m;
    EXPECT_NE(m.find("30"), std::string::npos) << m;
  }
  auto bad = greedy({int32_t(e->info().n_vocab)}, 1);
  EXPECT_THROW(e->validate(bad), Error);
  auto result = e->generate(greedy(std::vector<int32_t>(40, 100), 30));
  EXPECT_EQ(result.finish_reason, "error");
}

TEST(Engine, LogprobsAreOfTheRawDistribution) {
  auto e = load_engine();
  auto req = greedy(encode(*e, "Logprobs please"), 5);
  req.logprobs = 5;
  auto r = e->generate(req);
  ASSERT_EQ(r.logprobs.size(), 5u);
  for (size_t i = 0; i < r.logprobs.size(); ++i) {
    const auto& lp = r.logprobs[i];
    EXPECT_EQ(lp.token, r.tokens[i]);
    ASSERT_EQ(lp.top.size(), 5u);
    EXPECT_EQ(lp.top[0].first, lp.token);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);
    double mass = 0;
    for (size_t k = 0; k < lp.top.size(); ++k) {
      mass += std::exp(lp.top[k].second);
      if (k) {
        EXPECT_LE(lp.top[k].second, lp.top[k - 1].second);
      }
    }
    EXPECT_LE(mass, 1.0 + 1e-5);
    EXPECT_LE(lp.logprob, 0.0f);
  }
}

}  // namespace
}  // namespace hearth
