// Stop strings: the streaming filter holds back what could still become a stop string and never
// releases any part of one; the engine ends with finish_reason "stop" and the text cut before it.
#include <gtest/gtest.h>

#include "runtime/engine.h"
#include "test_model.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

std::string feed(StopStringFilter& f, const std::vector<std::string>& pieces,
                 std::vector<std::string>* out = nullptr) {
  std::string all;
  for (const auto& p : pieces) {
    std::string s = f.push(p);
    if (out) out->push_back(s);
    all += s;
  }
  return all + f.flush();
}

TEST(StopStringFilter, HoldsBackPartialMatchesAcrossPieces) {
  StopStringFilter f({"STOP"});
  std::vector<std::string> out;
  EXPECT_EQ(feed(f, {"abc S", "T", "O", "P tail"}, &out), "abc ");
  EXPECT_TRUE(f.matched());
  EXPECT_EQ(f.matched_stop(), "STOP");
  EXPECT_EQ(out[0], "abc ");  // "S" held back
  EXPECT_EQ(out[1], "");
}

TEST(StopStringFilter, ReleasesDisprovenPrefixes) {
  StopStringFilter f({"STOP"});
  std::vector<std::string> out;
  EXPECT_EQ(feed(f, {"ST", "ART", " and ST"}, &out), "START and ST");
  EXPECT_FALSE(f.matched());
  EXPECT_EQ(out[0], "");
  EXPECT_EQ(out[1], "START");
  EXPECT_EQ(out[2], " and ");  // "ST" held until flush
}

TEST(StopStringFilter, EarliestOfSeveralWins) {
  StopStringFilter f({"world", "lo w", ""});
  EXPECT_EQ(feed(f, {"hello world"}), "hel");
  EXPECT_EQ(f.matched_stop(), "lo w");
}

TEST(StopStringFilter, NoStopsPassesThrough) {
  StopStringFilter f({});
  EXPECT_EQ(feed(f, {"a", "b", ""}), "ab");
}

class ScriptedEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = std::make_shared<const Tokenizer>(Tokenizer::load(testing::qwen3_tokenizer_dir()));
    engine_ = std::make_unique<Engine>(
        testing::make_scripted_model(*tok_, testing::default_scripts()), tok_,
        ModelConfig::from_json({{"model_type", "qwen3"}}), EngineOptions{});
  }
  GenerationRequest ask(const std::string& user) {
    GenerationRequest r;
    r.prompt = tok_->encode("<|im_start|>user\n" + user + testing::kQwenAssistantTurn, false);
    r.max_tokens = 100;
    r.sampling.temperature = 0;
    return r;
  }
  std::shared_ptr<const Tokenizer> tok_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(ScriptedEngine, FollowsTheScript) {
  auto r = engine_->generate(ask("Count to ten."));
  EXPECT_EQ(r.text, "one, two, three, four, five, six, seven, eight, nine, ten.");
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_TRUE(r.stop_token.has_value());
}

TEST_F(ScriptedEngine, StopStringNeverLeaksIntoDeltas) {
  for (const std::string stop : {"four", "r, f", "ten.", "seven, eight"}) {
    auto req = ask("Count to ten.");
    req.stop = {stop, "never matches"};
    std::string streamed;
    auto r = engine_->generate(req, [&](const GenerationDelta& d) {
      streamed += d.text;
      EXPECT_EQ(d.text.find(stop.substr(0, 2)), std::string::npos) << d.text;
    });
    const std::string full = "one, two, three, four, five, six, seven, eight, nine, ten.";
    EXPECT_EQ(r.text, full.substr(0, full.find(stop))) << stop;
    EXPECT_EQ(streamed, r.text);
    EXPECT_EQ(r.finish_reason, "stop");
    EXPECT_EQ(r.stop_string, stop);
  }
}

TEST_F(ScriptedEngine, MaxTokensGivesLength) {
  auto req = ask("Count to ten.");
  req.max_tokens = 3;
  auto r = engine_->generate(req);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.usage.completion_tokens, 3);
}

}  // namespace
}  // namespace hearth
