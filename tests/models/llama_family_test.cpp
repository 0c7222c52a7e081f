// The llama family against the transformers fixtures: logits within 1e-3 of the reference's
// standard deviation, identical greedy continuations, and the invariants every model must keep
// (prefill-all equals prefill-then-decode at every position; chunked prefill equals one-shot).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "fixture.h"
#include "models/llama.h"
#include "models/model.h"
#include "runtime/generate.h"

namespace hearth {
namespace {

using test::FixtureCase;

std::vector<FixtureCase> llama_cases() { return test::fixture_cases(test::llama_fixture_types()); }

std::vector<int32_t> prompt_of(const FixtureCase& c) {
  return c.reference["prompt"].get<std::vector<int32_t>>();
}

// Dynamic NTK rope recomputes frequencies from the sequence length of each forward, as
// transformers does, so chunked and one-shot prefill legitimately differ there.
bool chunking_changes_math(const FixtureCase& c) { return c.name == "llama_rope_dynamic"; }

class LlamaFamily : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(LlamaFamily, LogitsMatchTransformers) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  NpyArray want = npy_read(c.dir + "/logits.npy");
  const int64_t n_vocab = model->info().n_vocab;
  ASSERT_EQ(want.shape, (std::vector<int64_t>{int64_t(prompt.size()), n_vocab}));
  std::vector<float> got(prompt.size() * size_t(n_vocab), NAN);
  auto state = model->new_sequence();
  model->forward(*state, prompt, LogitsRows::All, got.data());
  const double err =
      test::max_error_rel_std(got.data(), want.f32, c.reference["logits_std"].get<double>());
  EXPECT_LT(err, 1e-3) << c.name << ": max |logits - reference| / std";
}

TEST_P(LlamaFamily, GreedyContinuationMatches) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  auto want = c.reference["greedy"].get<std::vector<int32_t>>();
  EXPECT_EQ(test::greedy_tokens(*model, prompt, want.size()), want) << c.name;
}

TEST_P(LlamaFamily, DecodeEqualsPrefillAtEveryPosition) {
  const FixtureCase& c = GetParam();
  if (chunking_changes_math(c)) GTEST_SKIP() << "dynamic rope depends on the forward's length";
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  const size_t n_vocab = size_t(model->info().n_vocab);
  std::vector<float> all(prompt.size() * n_vocab);
  auto s1 = model->new_sequence();
  model->forward(*s1, prompt, LogitsRows::All, all.data());
  auto s2 = model->new_sequence();
  std::vector<float> one(n_vocab);
  const double std = c.reference["logits_std"].get<double>();
  for (size_t i = 0; i < prompt.size(); ++i) {
    model->forward(*s2, std::span<const int32_t>(&prompt[i], 1), LogitsRows::Last, one.data());
    std::vector<float> row(all.begin() + long(i * n_vocab), all.begin() + long((i + 1) * n_vocab));
    ASSERT_LT(test::max_error_rel_std(one.data(), row, std), 1e-4) << c.name << " position " << i;
  }
}

// Several sequences at different positions stepped together (Model::forward_batch) give each
// the logits it gets alone and advance each by its tokens: decode tokens mixed with chunks of
// prompt, some without logits; the batch's greedy tokens are the lone ones.
TEST_P(LlamaFamily, BatchedStepEqualsEachAlone) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  const auto prompt = prompt_of(c);
  const size_t n_vocab = size_t(model->info().n_vocab);
  const double std = c.reference["logits_std"].get<double>();
  // Three sequences holding prompts of different lengths (prefixes of the reference prompt).
  const size_t lens[] = {prompt.size(), std::max<size_t>(1, prompt.size() / 2), 1};
  std::vector<std::unique_ptr<SequenceState>> batched, alone;
  for (size_t len : lens) {
    const std::span<const int32_t> p(prompt.data(), len);
    batched.push_back(model->new_sequence());
    alone.push_back(model->new_sequence());
    model->forward(*batched.back(), p, LogitsRows::None, nullptr);
    model->forward(*alone.back(), p, LogitsRows::None, nullptr);
  }
  // Step 0 runs a 3-token chunk on sequence 1 and a 2-token chunk without logits on sequence 2;
  // the later steps one token each.
  std::vector<std::vector<int32_t>> inputs = {
      {prompt[0]}, {prompt.back(), prompt[0], 5 % int32_t(n_vocab)}, {7 % int32_t(n_vocab), 3}};
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<float>> batch(3, std::vector<float>(n_vocab));
    std::vector<Model::BatchItem> items;
    for (size_t i = 0; i < 3; ++i) {
      const bool logits = step > 0 || i != 2;
      items.push_back({batched[i].get(), inputs[i], logits ? batch[i].data() : nullptr});
    }
    model->forward_batch(items);
    for (size_t i = 0; i < 3; ++i) {
      std::vector<float> one(n_vocab);
      const bool logits = items[i].logits != nullptr;
      model->forward(*alone[i], inputs[i], logits ? LogitsRows::Last : LogitsRows::None,
                     logits ? one.data() : nullptr);
      EXPECT_EQ(batched[i]->n_past(), alone[i]->n_past());
      if (!logits) {
        inputs[i] = {11 % int32_t(n_vocab)};
        continue;
      }
      ASSERT_LT(test::max_error_rel_std(one.data(), batch[i], std), 1e-4)
          << c.name << " sequence " << i << " step " << step;
      inputs[i] = {int32_t(std::max_element(batch[i].begin(), batch[i].end()) - batch[i].begin())};
    }
  }
  std::vector<float> two(n_vocab);
  const std::vector<int32_t> one_token = {1};
  const Model::BatchItem twice[] = {{batched[0].get(), one_token, two.data()},
                                    {batched[0].get(), one_token, nullptr}};
  EXPECT_THROW(model->forward_batch(twice), Error);
  const Model::BatchItem empty[] = {{batched[0].get(), {}, nullptr}};
  EXPECT_THROW(model->forward_batch(empty), Error);
}

TEST_P(LlamaFamily, ChunkedPrefillEqualsOneShot) {
  const FixtureCase& c = GetParam();
  if (chunking_changes_math(c)) GTEST_SKIP() << "dynamic rope depends on the forward's length";
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  const size_t n_vocab = size_t(model->info().n_vocab);
  std::vector<float> whole;
  auto s0 = model->new_sequence();
  prefill(*model, *s0, prompt, int64_t(prompt.size()), &whole);
  const double std = c.reference["logits_std"].get<double>();
  for (int64_t chunk : {1, 7, 64}) {
    std::vector<float> chunked;
    auto s = model->new_sequence();
    prefill(*model, *s, prompt, chunk, &chunked);
    ASSERT_EQ(chunked.size(), n_vocab);
    EXPECT_LT(test::max_error_rel_std(chunked.data(), whole, std), 1e-4)
        << c.name << " chunk " << chunk;
  }
}

// Picking ahead (the default here: at once, ids on the host) gives forward_pick's tokens,
// greedy and sampled; taking a pick nothing queued, or continuing from no pick, is an error.
TEST_P(LlamaFamily, PickingAheadEqualsOneStepAtATime) {
  const FixtureCase& c = GetParam();
  auto model = load_model(c.dir);
  auto prompt = prompt_of(c);
  for (TokenPick pick : {TokenPick{}, TokenPick{0.9f, 20, 0.95f, 0.0f, 0.0}}) {
    auto [plain, ahead] = test::decode_both_ways(*model, prompt, 6, pick, 11);
    EXPECT_EQ(ahead, plain) << c.name << " temperature " << pick.temperature;
  }
  EXPECT_THROW(model->take_pick(), Error);
  auto fresh = load_model(c.dir);
  auto s = fresh->new_sequence();
  EXPECT_THROW(fresh->queue_pick(*s, Model::kPickedToken, TokenPick{}), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaFamily, ::testing::ValuesIn(llama_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace hearth
