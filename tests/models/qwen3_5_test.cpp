// The Qwen3.5 family (qwen3_5, qwen3_5_text and its MLX twin, qwen3_next, qwen3_moe, qwen3_5_moe)
// against the transformers fixtures: logits within 1e-3 of the reference's standard deviation,
// identical greedy continuations, and the invariants of a recurrent-state model: prefill-all
// equals prefill-then-decode at every position; a prompt fed across several calls equals one
// call; prefill chunk sizes 1, 63, 64, 65, 200 agree; the chunked delta rule equals the
// recurrence; snapshot/restore and truncate-to-snapshot regenerate identically; the MLX twin
// equals its Hugging Face twin.
#include "models/qwen3_5.h"

#include <gtest/gtest.h>

#include <random>

#include "fixture.h"
#include "models/model.h"
#include "runtime/generate.h"

namespace hearth {
namespace {

using test::FixtureCase;

std::vector<FixtureCase> qwen3_5_cases() { return test::fixture_cases(qwen3_5_model_types()); }

std::vector<int32_t> prompt_of(const FixtureCase& c) {
  return c.reference["prompt"].get<std::vector<int32_t>>();
}

double std_of(const FixtureCase& c) { return c.reference["logits_std"].get<double>(); }

// Chunked (prefill) against recurrent (decode) delta rule. The chunked form in f32 is ~5e-6 of the
// output's scale from a float64 recurrence (the recurrence ~2e-7; gated_delta_op_test), and the
// gated RMSNorm after it amplifies that wherever a head's output is small: on these random-weight
// fixtures the two forms differ by up to 3.1e-4 of logits_std (qwen3_5), 1.1e-4 (qwen3_5_text,
// qwen3_next). transformers' own chunked/recurrent split has the same property.
// qwen3_5's weights make position 65 (second token of the second chunk) ill-conditioned: any
// rounding change (chunked vs recurrent, or the matmul kernel picked for 1 vs many rows) moves its
// logits by up to ~1.1e-3 of logits_std while every other position stays below 3e-4.
double chunked_vs_recurrent(const FixtureCase& c) { return c.name == "qwen3_5" ? 2e-3 : 5e-4; }
// Same algorithm and chunk boundaries on both sides: rounding only.
constexpr double kSameAlgorithm = 1e-4;

// The reference logits come from transformers' f32 chunked prefill, whose own rounding shows at a
// few ill-conditioned positions: for qwen3_5 (tied, logits_std 8) position 65 is 1.3e-3 (chunked)
// / 1.45e-3 (f32 recurrence, accurate to ~2e-7 at op level) away from the reference while every
// other position is within 3e-4. Documented in docs/qwen3_5.md; all other cases meet 1e-3.
double logits_tolerance(const FixtureCase& c) { return c.name == "qwen3_5" ? 2e-3 : 1e-3; }

std::vector<float> all_logits(Model& model, SequenceState& state, std::span<const int32_t> tokens) {
  std::vector<float> out(tokens.size() * size_t(model.info().n_vocab), NAN);
  model.forward(state, tokens, LogitsRows::All, out.data());
  return out;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want, double std) {
  EXPECT_EQ(got.size(), want.size());
  return test::max_error_rel_std(got.data(), want, std);
}

// Greedy decode of `n` tokens from a state whose last logits are `logits`.
std::vector<int32_t> greedy(Model& model, SequenceState& state, std::vector<float> logits, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    model.forward(state, std::span<const int32_t>(&t, 1), LogitsRows::Last, logits.data());
  }
  return out;
}

class Qwen35Family : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(Qwen35Family, LogitsMatchTransformers) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  NpyArray want = npy_read(c.dir + "/logits.npy");
  ASSERT_EQ(want.shape, (std::vector<int64_t>{int64_t(prompt.size()), model->info().n_vocab}));
  auto state = model->new_sequence();
  EXPECT_LT(rel_err(all_logits(*model, *state, prompt), want.f32, std_of(c)), logits_tolerance(c))
      << c.name;
}

TEST_P(Qwen35Family, GreedyContinuationMatches) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto want = c.reference["greedy"].get<std::vector<int32_t>>();
  EXPECT_EQ(test::greedy_tokens(*model, prompt_of(c), want.size()), want) << c.name;
}

TEST_P(Qwen35Family, DecodeEqualsPrefillAtEveryPosition) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  const size_t n_vocab = size_t(model->info().n_vocab);
  auto s1 = model->new_sequence();
  auto all = all_logits(*model, *s1, prompt);
  auto s2 = model->new_sequence();
  std::vector<float> one(n_vocab);
  for (size_t i = 0; i < prompt.size(); ++i) {
    model->forward(*s2, std::span<const int32_t>(&prompt[i], 1), LogitsRows::Last, one.data());
    std::vector<float> row(all.begin() + long(i * n_vocab), all.begin() + long((i + 1) * n_vocab));
    ASSERT_LT(test::max_error_rel_std(one.data(), row, std_of(c)), chunked_vs_recurrent(c))
        << c.name << " position " << i;
  }
}

TEST_P(Qwen35Family, PromptAcrossSeveralCallsEqualsOneCall) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  auto s1 = model->new_sequence();
  auto whole = all_logits(*model, *s1, prompt);
  auto s2 = model->new_sequence();
  std::vector<float> pieces;
  const std::span<const int32_t> p(prompt);
  for (auto [b, e] : {std::pair<size_t, size_t>{0, 5}, {5, 6}, {6, 37}, {37, prompt.size()}}) {
    auto part = all_logits(*model, *s2, p.subspan(b, e - b));
    pieces.insert(pieces.end(), part.begin(), part.end());
  }
  EXPECT_EQ(s2->n_past(), int64_t(prompt.size()));
  // Pieces of 1 token run the recurrence; the others restart chunk boundaries.
  EXPECT_LT(rel_err(pieces, whole, std_of(c)), chunked_vs_recurrent(c)) << c.name;
}

TEST_P(Qwen35Family, PrefillChunkSizesAgree) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  std::vector<float> whole;
  auto s0 = model->new_sequence();
  prefill(*model, *s0, prompt, int64_t(prompt.size()), &whole);
  for (int64_t chunk : {1, 63, 64, 65}) {
    std::vector<float> got;
    auto s = model->new_sequence();
    prefill(*model, *s, prompt, chunk, &got);
    EXPECT_LT(rel_err(got, whole, std_of(c)), chunk == 1 ? chunked_vs_recurrent(c) : kSameAlgorithm)
        << c.name << " chunk " << chunk;
  }
  // A longer random prompt for chunk 200 (the fixture prompts are shorter than that).
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> dist(3, int32_t(model->info().n_vocab - 1));
  std::vector<int32_t> long_prompt(230);
  for (auto& t : long_prompt) t = dist(rng);
  auto sl = model->new_sequence();
  prefill(*model, *sl, long_prompt, int64_t(long_prompt.size()), &whole);
  for (int64_t chunk : {200, 64}) {
    std::vector<float> got;
    auto s = model->new_sequence();
    prefill(*model, *s, long_prompt, chunk, &got);
    EXPECT_LT(rel_err(got, whole, std_of(c)), kSameAlgorithm)
        << c.name << " long prompt, chunk " << chunk;
  }
}

TEST_P(Qwen35Family, RecurrentPrefillEqualsChunked) {
  const FixtureCase& c = GetParam();
  auto chunked = load_model(c.dir);
  LoadOptions options;
  options.gdn_recurrent_prefill = true;
  auto recurrent = load_model(c.dir, options);
  auto prompt = prompt_of(c);
  auto s1 = chunked->new_sequence();
  auto s2 = recurrent->new_sequence();
  EXPECT_LT(
      rel_err(all_logits(*recurrent, *s2, prompt), all_logits(*chunked, *s1, prompt), std_of(c)),
      chunked_vs_recurrent(c))
      << c.name;
}

TEST_P(Qwen35Family, SnapshotRestoreRegeneratesIdentically) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  const size_t n_vocab = size_t(model->info().n_vocab);
  auto state = model->new_sequence();
  auto& seq = dynamic_cast<Qwen35Sequence&>(*state);
  std::vector<float> logits(n_vocab);
  model->forward(seq, prompt, LogitsRows::Last, logits.data());
  auto snap = seq.snapshot();
  EXPECT_EQ(snap->n_past, int64_t(prompt.size()));
  auto first = greedy(*model, seq, logits, 12);
  ASSERT_TRUE(seq.restore(*snap));
  EXPECT_EQ(seq.n_past(), int64_t(prompt.size()));
  EXPECT_EQ(greedy(*model, seq, logits, 12), first) << c.name << ": after restore";

  // truncate() goes back only to a kept snapshot (or 0), unless the stack has no recurrent
  // layers (qwen3_moe): then anywhere, like a KV cache.
  ASSERT_TRUE(seq.restore(*snap));
  seq.keep_snapshot();
  greedy(*model, seq, logits, 5);
  EXPECT_EQ(seq.truncate(int64_t(prompt.size()) + 2), !seq.needs_checkpoints())
      << c.name << ": no snapshot there";
  ASSERT_TRUE(seq.truncate(int64_t(prompt.size())));
  EXPECT_EQ(greedy(*model, seq, logits, 12), first) << c.name << ": after truncate";
  // A restored snapshot must not see positions it never had.
  auto fresh = model->new_sequence();
  EXPECT_FALSE(dynamic_cast<Qwen35Sequence&>(*fresh).restore(*snap));
  ASSERT_TRUE(seq.truncate(0));
  EXPECT_EQ(seq.n_past(), 0);
  std::vector<float> again(n_vocab);
  model->forward(seq, prompt, LogitsRows::Last, again.data());
  EXPECT_EQ(again, logits) << "truncate(0) resets every state";
}

// Picking ahead (the default here: at once, ids on the host) gives forward_pick's tokens.
TEST_P(Qwen35Family, PickingAheadEqualsOneStepAtATime) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  for (TokenPick pick : {TokenPick{}, TokenPick{0.9f, 20, 0.95f, 0.0f, 0.0}}) {
    auto [plain, ahead] = test::decode_both_ways(*model, prompt_of(c), 6, pick, 11);
    EXPECT_EQ(ahead, plain) << c.name << " temperature " << pick.temperature;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen35Family, ::testing::ValuesIn(qwen3_5_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Qwen35Mlx, TwinGivesTheSameLogitsAsHuggingFace) {
  const std::string root = test::fixture_root();
  auto hf = load_model(root + "/qwen3_5_text");
  auto mlx = load_model(root + "/qwen3_5_text_mlx");
  auto c = test::fixture_cases({"qwen3_5_text"});
  ASSERT_FALSE(c.empty());
  auto prompt = prompt_of(c[0]);
  auto s1 = hf->new_sequence();
  auto s2 = mlx->new_sequence();
  auto a = all_logits(*hf, *s1, prompt);
  auto b = all_logits(*mlx, *s2, prompt);
  // Same numbers: the MLX gains are 1 + w exactly, the conv the same values in another layout.
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace hearth
