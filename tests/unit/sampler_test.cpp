// The sampling chain: greedy, truncations, penalties, logit bias, seeded determinism, and the
// validation of impossible parameters.
#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/error.h"

namespace hearth {
namespace {

std::vector<float> random_logits(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

int argmax(const std::vector<float>& v) {
  return int(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(Sampler, GreedyIsArgmax) {
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p, 100);
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto logits = random_logits(100, seed);
    const int want = argmax(logits);
    EXPECT_EQ(s.sample(logits, {}), want);
  }
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  p.seed = 7;
  Sampler s(p, 64);
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto logits = random_logits(64, seed);
    const int want = argmax(logits);
    EXPECT_EQ(s.sample(logits, {}), want);
  }
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  Sampler a(p, 50), b(p, 50);
  std::vector<int32_t> ta, tb;
  for (uint32_t i = 0; i < 50; ++i) {
    auto la = random_logits(50, i), lb = la;
    ta.push_back(a.sample(la, {}));
    tb.push_back(b.sample(lb, {}));
  }
  EXPECT_EQ(ta, tb);
  // and a different seed gives a different sequence (50 draws from 50 near-uniform tokens)
  p.seed = 43;
  Sampler c(p, 50);
  std::vector<int32_t> tc;
  for (uint32_t i = 0; i < 50; ++i) {
    auto l = random_logits(50, i);
    tc.push_back(c.sample(l, {}));
  }
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities ~ 0.5, 0.3, 0.15, 0.05: top_p 0.7 keeps the first two only.
  std::vector<float> base = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.7f;
  p.seed = 1;
  Sampler s(p, 4);
  std::map<int, int> counts;
  for (int i = 0; i < 2000; ++i) {
    auto l = base;
    ++counts[s.sample(l, {})];
  }
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[0], counts[1]);
  EXPECT_GT(counts[1], 400);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  std::vector<float> base = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;  // threshold 0.12: token 2 (0.1) is dropped
  p.seed = 3;
  Sampler s(p, 3);
  for (int i = 0; i < 1000; ++i) {
    auto l = base;
    EXPECT_NE(s.sample(l, {}), 2);
  }
}

TEST(Sampler, RepetitionPenaltyFollowsTransformers) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  Sampler s(p, 3);
  std::vector<float> logits = {4.0f, 3.0f, -1.0f};
  std::vector<int32_t> history = {0, 2};
  s.sample(logits, history);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);   // positive: divided
  EXPECT_FLOAT_EQ(logits[1], 3.0f);   // unseen: unchanged
  EXPECT_FLOAT_EQ(logits[2], -2.0f);  // negative: multiplied
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler s(p, 3);
  std::vector<float> logits = {1.0f, 1.0f, 1.0f};
  std::vector<int32_t> history = {1, 1, 1, 2};
  s.sample(logits, history);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 0.5f - 0.75f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f - 0.5f - 0.25f);
  // The same sampler on the next step counts afresh (nothing left over from the last history).
  std::vector<float> next = {1.0f, 1.0f, 1.0f};
  std::vector<int32_t> next_history = {0, 0, 2};
  s.sample(next, next_history);
  EXPECT_FLOAT_EQ(next[0], 1.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(next[1], 1.0f);
  EXPECT_FLOAT_EQ(next[2], 1.0f - 0.5f - 0.25f);
}

TEST(Sampler, LogitBiasForcesAToken) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  p.logit_bias[7] = 100.0f;
  Sampler s(p, 10);
  for (uint32_t i = 0; i < 50; ++i) {
    auto l = random_logits(10, i);
    EXPECT_EQ(s.sample(l, {}), 7);
  }
}

TEST(Sampler, ImpossibleParametersAreNamed) {
  auto expect_error = [](SamplingParams p, const char* name) {
    try {
      Sampler s(p, 10);
      ADD_FAILURE() << "no error for " << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  SamplingParams p;
  p.temperature = -1;
  expect_error(p, "temperature");
  p = {};
  p.top_p = 0;
  expect_error(p, "top_p");
  p = {};
  p.top_k = -3;
  expect_error(p, "top_k");
  p = {};
  p.min_p = 1.5f;
  expect_error(p, "min_p");
  p = {};
  p.repetition_penalty = 0;
  expect_error(p, "repetition_penalty");
  p = {};
  p.logit_bias[10] = 1.0f;
  expect_error(p, "logit_bias");
}

}  // namespace
}  // namespace hearth
