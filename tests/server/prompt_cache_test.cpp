// PromptCache with stand-in states: longest-prefix choice, LRU byte cap, and the recurrent case
// where a state can only go back to the checkpoints it kept.
#include "kv/prompt_cache.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

// recurrent = true: truncate() only succeeds at kept checkpoints (as Gated DeltaNet states).
class FakeState : public SequenceState {
 public:
  explicit FakeState(int64_t n, bool recurrent = false, size_t bytes_per_token = 10)
      : n_(n), recurrent_(recurrent), bpt_(bytes_per_token) {}
  int64_t n_past() const override { return n_; }
  bool truncate(int64_t n) override {
    if (n > n_) return false;
    if (recurrent_ && n != n_ && std::find(cps_.begin(), cps_.end(), n) == cps_.end()) return false;
    n_ = n;
    return true;
  }
  void keep_checkpoint() override { cps_.push_back(n_); }
  bool needs_checkpoints() const override { return recurrent_; }
  size_t bytes() const override { return size_t(n_) * bpt_; }
  size_t bytes_after(int64_t n_more) const override { return size_t(n_ + n_more) * bpt_; }
  std::vector<int64_t> cps_;

 private:
  int64_t n_;
  bool recurrent_;
  size_t bpt_;
};

std::vector<int32_t> seq(int from, int n) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(from + i);
  return v;
}

TEST(PromptCache, TakesTheLongestCommonPrefix) {
  PromptCache cache(1 << 20);
  cache.release(seq(0, 10), std::make_unique<FakeState>(10), {});
  auto other = seq(0, 4);
  other.push_back(99);
  other.push_back(98);
  cache.release(other, std::make_unique<FakeState>(6), {});
  auto prompt = seq(0, 8);
  prompt.push_back(7777);
  auto hit = cache.acquire(prompt, int64_t(prompt.size()) - 1);
  ASSERT_TRUE(hit.state);
  EXPECT_EQ(hit.n_reused, 8);
  EXPECT_EQ(hit.state->n_past(), 8);
  EXPECT_EQ(cache.stats().entries, 1u);  // the other entry stays
  EXPECT_EQ(cache.stats().hits, 1u);
}

TEST(PromptCache, NeverReusesThePromptsLastToken) {
  PromptCache cache(1 << 20);
  cache.release(seq(0, 10), std::make_unique<FakeState>(10), {});
  auto prompt = seq(0, 10);
  auto hit = cache.acquire(prompt, int64_t(prompt.size()) - 1);
  EXPECT_EQ(hit.n_reused, 9);
}

TEST(PromptCache, MissLeavesEntries) {
  PromptCache cache(1 << 20);
  cache.release(seq(0, 10), std::make_unique<FakeState>(10), {});
  auto hit = cache.acquire(seq(50, 5), 4);
  EXPECT_FALSE(hit.state);
  EXPECT_EQ(cache.stats().entries, 1u);
}

TEST(PromptCache, RecurrentStateFallsBackToACheckpoint) {
  PromptCache cache(1 << 20);
  auto state = std::make_unique<FakeState>(300, true);
  state->cps_ = {256, 290};
  cache.release(seq(0, 300), std::move(state), {256, 290});
  auto prompt = seq(0, 280);
  prompt.push_back(-5);
  auto hit = cache.acquire(prompt, int64_t(prompt.size()) - 1);
  ASSERT_TRUE(hit.state);
  EXPECT_EQ(hit.n_reused, 256);  // 280 is not a checkpoint; 290 is past the common prefix
  EXPECT_EQ(hit.checkpoints, (std::vector<int64_t>{256}));
}

// A checkpoint within the common prefix decides, not the prefix's length: a recurrent entry
// with none there is a miss and stays cached for prompts it can serve.
TEST(PromptCache, RecurrentStateWithoutUsableCheckpointStaysCached) {
  PromptCache cache(1 << 20);
  cache.release(seq(0, 100), std::make_unique<FakeState>(100, true), {100});
  auto hit = cache.acquire(seq(0, 50), 49);
  EXPECT_FALSE(hit.state);
  EXPECT_EQ(cache.stats().entries, 1u);
  auto longer = seq(0, 120);
  hit = cache.acquire(longer, 119);
  ASSERT_TRUE(hit.state);
  EXPECT_EQ(hit.n_reused, 100);
}

// Between entries, the one that serves the most positions wins: a recurrent state's last
// checkpoint within the prefix, not its longest common prefix.
TEST(PromptCache, RecurrentStateChosenByItsCheckpoints) {
  PromptCache cache(1 << 20);
  auto longer = seq(0, 150);
  longer[130] = -1;
  auto state = std::make_unique<FakeState>(150, true);
  state->cps_ = {64};
  cache.release(longer, std::move(state), {64});
  cache.release(seq(0, 90), std::make_unique<FakeState>(90, true), {90});
  ASSERT_EQ(cache.stats().entries, 2u);
  auto prompt = seq(0, 140);
  auto hit = cache.acquire(prompt, 139);
  ASSERT_TRUE(hit.state);
  EXPECT_EQ(hit.n_reused, 90);  // the longer entry shares 130 tokens but can only go back to 64
}

TEST(PromptCache, EvictsLeastRecentlyUsedOverTheCap) {
  PromptCache cache(250);  // 10 bytes per token
  cache.release(seq(0, 10), std::make_unique<FakeState>(10), {});
  cache.release(seq(100, 10), std::make_unique<FakeState>(10), {});
  cache.release(seq(200, 10), std::make_unique<FakeState>(10), {});  // 300 bytes: first goes
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_LE(cache.stats().bytes, 250u);
  EXPECT_FALSE(cache.acquire(seq(0, 5), 4).state);
  EXPECT_TRUE(cache.acquire(seq(100, 5), 4).state);
  cache.release(seq(0, 1000), std::make_unique<FakeState>(1000), {});  // larger than the cap
  EXPECT_LE(cache.stats().bytes, 250u);
}

TEST(PromptCache, ExtendingEntryReplacesItsPrefix) {
  PromptCache cache(1 << 20);
  cache.release(seq(0, 10), std::make_unique<FakeState>(10), {});
  cache.release(seq(0, 20), std::make_unique<FakeState>(20), {});
  EXPECT_EQ(cache.stats().entries, 1u);
}

}  // namespace
}  // namespace hearth
