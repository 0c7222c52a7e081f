// Prompt cache on a hybrid (Gated DeltaNet + attention) model, the committed models/default
// (qwen3_5_text): recurrent states cannot be cut back, so a second turn resumes from the
// snapshot the engine kept at the first prompt's end (or at a 256-position interval), and its
// greedy output equals a fresh prefill's.
#include <gtest/gtest.h>

#include "runtime/engine.h"
#include "test_model.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

std::unique_ptr<Engine> load_default(size_t cache_bytes) {
  EngineOptions o;
  o.model_dir = std::string(HEARTH_SOURCE_DIR) + "/models/default";
  o.cache_bytes = cache_bytes;
  return Engine::load(o);
}

using testing::greedy;

std::vector<int32_t> operator+(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class HybridCache : public ::testing::Test {
 protected:
  void SetUp() override {
    cached_ = load_default(size_t{256} << 20);
    fresh_ = load_default(0);
    ASSERT_EQ(cached_->info().model_type, "qwen3_5_text");
  }
  std::vector<int32_t> encode(const std::string& text) {
    return cached_->tokenizer()->encode(text, false);
  }
  // Runs `prompt` on both engines: same tokens, and the cached engine's reuse.
  int64_t run_both(const std::vector<int32_t>& prompt) {
    const auto c = cached_->generate(greedy(prompt, 8));
    const auto f = fresh_->generate(greedy(prompt, 8));
    EXPECT_EQ(c.finish_reason, "length") << c.error;
    EXPECT_EQ(f.usage.cached_tokens, 0);
    EXPECT_EQ(c.tokens, f.tokens);
    return c.usage.cached_tokens;
  }
  std::unique_ptr<Engine> cached_, fresh_;
};

TEST_F(HybridCache, SecondTurnResumesAtTheFirstPromptsEnd) {
  const auto p1 = encode(
      "<|im_start|>user\nTell me about the sea and the ships.<|im_end|>\n<|im_start|>assistant\n");
  const auto a = cached_->generate(greedy(p1, 12));
  EXPECT_EQ(a.usage.cached_tokens, 0);
  // The client sends the reply back verbatim: everything the state holds is reused.
  const auto more = encode("<|im_end|>\n<|im_start|>user\nAnd the mountains?<|im_end|>\n");
  const auto verbatim = p1 + a.tokens + more;
  EXPECT_EQ(run_both(verbatim), int64_t(p1.size() + a.tokens.size()) - 1);
  // The client edits the reply: the recurrent state goes back to the snapshot at p1's end.
  const auto edited = p1 + encode("Something else entirely.") + more;
  EXPECT_EQ(run_both(edited), int64_t(p1.size()));
}

TEST_F(HybridCache, LongPromptResumesAtAnIntervalCheckpoint) {
  std::string text = "<|im_start|>user\n";
  while (encode(text).size() < 300) text += "The lighthouse keeper counted the ships again. ";
  const auto p1 = encode(text);
  ASSERT_GT(p1.size(), 256u);
  cached_->generate(greedy(p1, 4));
  // Diverges after position 256 but before p1's end: back to the checkpoint at 256.
  std::vector<int32_t> p2(p1.begin(), p1.begin() + 280);
  p2 = p2 + encode(" A storm came.");
  EXPECT_EQ(run_both(p2), 256);
}

}  // namespace
}  // namespace hearth
