// The public C++ API (include/hearth/hearth.h) on the bundled default model: streamed pieces
// concatenate to the completion, concurrent submitters get what a lone request gets, cancel and
// destruction complete every request, impossible requests throw before anything is queued, and
// the counters add up.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "hearth/hearth.h"

namespace {

const std::string kModel = std::string(HEARTH_SOURCE_DIR) + "/models/default";

hearth::CompletionRequest greedy(const std::string& prompt, int64_t max_tokens) {
  hearth::CompletionRequest r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.temperature = 0.0f;
  return r;
}

class Api : public ::testing::Test {
 protected:
  void SetUp() override { runtime_ = hearth::Runtime::load({.model = kModel, .threads = 2}); }
  std::unique_ptr<hearth::Runtime> runtime_;
};

TEST_F(Api, StreamedPiecesMakeTheCompletion) {
  std::string streamed;
  const auto done = runtime_->complete(greedy("The Python interpreter", 16),
                                       [&](std::string_view t) { streamed += t; });
  EXPECT_EQ(done.finish_reason, "length");
  EXPECT_EQ(done.completion_tokens, 16);
  EXPECT_GT(done.prompt_tokens, 0);
  EXPECT_FALSE(done.text.empty());
  EXPECT_EQ(streamed, done.text);
  const auto m = runtime_->metrics();
  EXPECT_EQ(m.requests_finished, 1);
  EXPECT_EQ(m.completion_tokens, 16);
  EXPECT_EQ(m.prompt_tokens, done.prompt_tokens);
  EXPECT_EQ(runtime_->model_type(), "qwen3_5_text");
  EXPECT_GT(runtime_->context(), 0);
}

TEST_F(Api, ChatTurnsAndStopStrings) {
  hearth::CompletionRequest r;
  r.messages = {{"user", "Write a list of three fruits."}};
  r.max_tokens = 24;
  r.temperature = 0.0f;
  const auto plain = runtime_->complete(r);
  ASSERT_EQ(plain.finish_reason, "length");
  ASSERT_GE(plain.text.size(), 4u);
  // A stop string taken from the middle of the greedy text ends it right before that string.
  r.stop = {plain.text.substr(plain.text.size() / 2, 3)};
  const auto stopped = runtime_->complete(r);
  EXPECT_EQ(stopped.finish_reason, "stop");
  EXPECT_EQ(plain.text.find(r.stop[0]), stopped.text.size());
}

TEST_F(Api, ConcurrentSubmittersGetTheLoneResult) {
  const auto lone = runtime_->complete(greedy("Once upon a time", 12)).text;
  std::vector<std::string> texts(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < texts.size(); ++i)
    threads.emplace_back(
        [&, i] { texts[i] = runtime_->submit(greedy("Once upon a time", 12)).wait().text; });
  for (auto& t : threads) t.join();
  for (const auto& t : texts) EXPECT_EQ(t, lone);
  EXPECT_EQ(runtime_->metrics().requests_finished, 5);
}

TEST_F(Api, CancelEndsARequest) {
  std::atomic<int> pieces{0};
  hearth::Generation g = runtime_->submit(greedy("A long story:", runtime_->context() - 16),
                                          [&](std::string_view) { ++pieces; });
  while (pieces.load() == 0 && !g.done()) std::this_thread::yield();
  g.cancel();
  const auto done = g.wait();
  EXPECT_EQ(done.finish_reason, "cancelled");
  EXPECT_TRUE(g.done());
}

TEST_F(Api, ImpossibleRequestsThrowAndAreNotQueued) {
  auto r = greedy("hello", 0);
  EXPECT_THROW(runtime_->submit(r), hearth::Error);  // max_tokens
  r = greedy("", 4);
  EXPECT_THROW(runtime_->submit(r), hearth::Error);  // empty prompt
  r = greedy("hello", 4);
  r.temperature = -1.0f;
  EXPECT_THROW(runtime_->submit(r), hearth::Error);
  r = greedy("hello", runtime_->context() + 1);
  EXPECT_THROW(runtime_->submit(r), hearth::Error);  // over the context
  const auto m = runtime_->metrics();
  EXPECT_EQ(m.requests_finished, 0);
  EXPECT_EQ(m.requests_waiting, 0);
}

TEST_F(Api, DestroyingTheRuntimeCompletesEveryRequest) {
  std::vector<hearth::Generation> gs;
  for (int i = 0; i < 3; ++i) gs.push_back(runtime_->submit(greedy("Tell me", 200)));
  runtime_.reset();
  for (auto& g : gs) {
    const auto done = g.wait();
    EXPECT_TRUE(done.finish_reason == "cancelled" || done.finish_reason == "error" ||
                done.finish_reason == "length")
        << done.finish_reason;
  }
}

// RuntimeOptions::prompt_cache_bytes reaches the engine: a prompt that continues an earlier one
// reuses all of it (the hybrid model resumes from the state kept at the earlier prompt's end),
// and with 0 nothing, for the same greedy text. The uncached runtime also copies its weights
// (mmap off), which must not change the text either.
TEST(ApiLoad, PromptCacheBytesAndMmapReachTheEngine) {
  const std::string first =
      "<|im_start|>user\nTell me about the sea and the ships.<|im_end|>\n<|im_start|>assistant\n";
  const std::string second =
      first +
      "Something else entirely.<|im_end|>\n<|im_start|>user\nAnd the mountains?<|im_end|>\n";
  auto cached = hearth::Runtime::load({.model = kModel, .threads = 2});
  auto uncached = hearth::Runtime::load(
      {.model = kModel, .threads = 2, .prompt_cache_bytes = 0, .mmap = false});
  const auto a = cached->complete(greedy(first, 4));
  const auto b = cached->complete(greedy(second, 8));
  EXPECT_EQ(b.cached_prompt_tokens, a.prompt_tokens);
  uncached->complete(greedy(first, 4));
  const auto c = uncached->complete(greedy(second, 8));
  EXPECT_EQ(c.cached_prompt_tokens, 0);
  EXPECT_EQ(c.text, b.text);
  EXPECT_EQ(cached->metrics().prompt_cache_hit_tokens, a.prompt_tokens);
}

TEST(ApiLoad, BadOptionsAreErrorsNamingThem) {
  try {
    hearth::Runtime::load({.model = "/nonexistent/model"});
    FAIL() << "loaded a missing model";
  } catch (const hearth::Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model"), std::string::npos) << e.what();
  }
  EXPECT_THROW(hearth::Runtime::load({}), hearth::Error);
  EXPECT_THROW(hearth::Runtime::load({.model = kModel, .threads = -1}), hearth::Error);
  EXPECT_THROW(hearth::Runtime::load({.model = kModel, .parallel = -1}), hearth::Error);
  EXPECT_THROW(hearth::Runtime::load({.model = kModel, .max_batch_tokens = -8}), hearth::Error);
  // A KV budget that cannot hold even 256 positions of the model is refused at load.
  EXPECT_THROW(hearth::Runtime::load({.model = kModel, .kv_budget_bytes = 1024}), hearth::Error);
  // tensor_parallel reaches the loader, which refuses a split of 6 attention heads over 4 ranks.
  try {
    hearth::Runtime::load({.model = kModel, .tensor_parallel = 4});
    FAIL() << "6 heads were split over 4 ranks";
  } catch (const hearth::Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads (6)"), std::string::npos) << e.what();
  }
}

// The default model (a Qwen3.5 hybrid) split over 2 ranks through the library: the same greedy
// text as the whole model, and the second request's prompt restored from the first's
// checkpointed prefix in the prompt cache.
TEST(ApiLoad, TensorParallelHybridGivesTheSameTextAndHitsThePromptCache) {
  const std::string first =
      "<|im_start|>user\nTell me about the sea and the ships.<|im_end|>\n<|im_start|>assistant\n";
  const std::string second =
      first + "Ships.<|im_end|>\n<|im_start|>user\nAnd the mountains?<|im_end|>\n";
  auto whole = hearth::Runtime::load({.model = kModel, .threads = 2});
  auto split = hearth::Runtime::load({.model = kModel, .threads = 2, .tensor_parallel = 2});
  const auto a = split->complete(greedy(first, 6));
  EXPECT_EQ(a.text, whole->complete(greedy(first, 6)).text);
  const auto b = split->complete(greedy(second, 6));
  EXPECT_EQ(b.cached_prompt_tokens, a.prompt_tokens);
  EXPECT_EQ(b.text, whole->complete(greedy(second, 6)).text);
}

}  // namespace
