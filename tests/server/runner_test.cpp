// The handler side of an engine request (server/runner.h): the server's request time limit ends
// a generation that runs past it, and one still waiting in the queue, with a 504 naming the flag.
#include "server/runner.h"

#include <gtest/gtest.h>

#include <thread>

#include "server/errors.h"
#include "test_model.h"

namespace hearth::server {
namespace {

class RequestTimeout : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = std::make_shared<const Tokenizer>(Tokenizer::load(testing::qwen3_tokenizer_dir()));
    start_engine(0);
    state_.ready = true;
    state_.options.request_timeout_s = 1;
  }
  // max_running 0: the engine's default.
  void start_engine(int64_t max_running) {
    if (engine_) engine_->shutdown();
    EngineOptions eo;
    eo.n_ctx = 4096;
    eo.max_running = max_running;
    // 20 ms a step: 1,000 tokens would take 20 s, the limit is 1 s.
    engine_ =
        std::make_shared<Engine>(testing::make_scripted_model(*tok_, testing::default_scripts(),
                                                              std::chrono::milliseconds(20)),
                                 tok_, ModelConfig::from_json({{"model_type", "qwen3"}}), eo);
  }
  void TearDown() override { engine_->shutdown(); }
  GenerationRequest long_request() {
    return testing::greedy(tok_->encode("Tell me a long story.", false), 1000);
  }
  std::shared_ptr<const Tokenizer> tok_;
  ServerState state_;
  std::shared_ptr<Engine> engine_;
};

TEST_F(RequestTimeout, ARunningGenerationEndsWithA504) {
  const auto start = Clock::now();
  EngineRequest er(state_, *engine_, long_request(), start);
  const GenerationResult r = pump(er, nullptr, {});
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r.finish_reason, "timeout");
  EXPECT_NE(r.error.find("--request-timeout"), std::string::npos) << r.error;
  EXPECT_GT(r.usage.completion_tokens, 0);  // it was running, not refused
  EXPECT_GE(secs, 1.0);
  EXPECT_LT(secs, 3.0);
  const auto failure = result_failure(state_, r);
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->status, 504);
}

TEST_F(RequestTimeout, AQueuedRequestTimesOutWhileWaiting) {
  start_engine(1);  // one request at a time: the second waits in the queue
  const auto start = Clock::now();
  // The first holds the engine well past the second's limit (its own limit is far off).
  EngineRequest first(state_, *engine_, long_request(), start + std::chrono::seconds(60));
  EngineRequest second(state_, *engine_, long_request(), start);
  GenerationResult r1;
  std::thread first_handler([&] { r1 = pump(first, nullptr, {}); });
  const GenerationResult r2 = pump(second, nullptr, {});
  first.cancel();
  first_handler.join();
  EXPECT_EQ(r2.finish_reason, "timeout");
  EXPECT_EQ(r2.usage.completion_tokens, 0);  // it never ran
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
  EXPECT_EQ(r1.finish_reason, "cancelled");
  EXPECT_GT(r1.usage.completion_tokens, 0);
}

TEST_F(RequestTimeout, NoLimitMeansNoTimeout) {
  state_.options.request_timeout_s = 0;
  EngineRequest er(state_, *engine_, testing::greedy(tok_->encode("Hi.", false), 60), Clock::now());
  const GenerationResult r = pump(er, nullptr, {});  // 60 steps: 1.2 s
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_FALSE(result_failure(state_, r).has_value());
}

}  // namespace
}  // namespace hearth::server
