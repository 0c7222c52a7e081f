// What the tensor-parallel tests of every family share: a fixture split over tp ranks
// (load_tp), the parameter (fixture, tp), and a test base that loads the whole and the split
// model, or, where the family's check refuses the shape, checks the loader refuses it with the
// same error before reading a weight and skips.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "fixture.h"
#include "loader/config.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace hearth::test {

inline std::unique_ptr<Model> load_tp(const FixtureCase& c, int tp) {
  LoadOptions options;
  options.tensor_parallel = tp;
  return load_model(c.dir, options);
}

// Every prompt row's logits from the whole model (want) and the split one (got), each from a
// fresh sequence (kept, for decode steps after).
struct SideBySide {
  std::unique_ptr<SequenceState> whole, split;
  std::vector<float> want, got;
};
inline SideBySide prefill_side_by_side(Model& whole, Model& split,
                                       std::span<const int32_t> prompt) {
  SideBySide r{whole.new_sequence(), split.new_sequence(), {}, {}};
  r.want.resize(prompt.size() * size_t(whole.info().n_vocab));
  r.got.assign(r.want.size(), NAN);
  whole.forward(*r.whole, prompt, LogitsRows::All, r.want.data());
  split.forward(*r.split, prompt, LogitsRows::All, r.got.data());
  return r;
}

struct TpCase {
  FixtureCase fixture;
  int tp;
};
inline void PrintTo(const TpCase& c, std::ostream* os) { *os << c.fixture.name << "_tp" << c.tp; }

// Each fixture at 2 and 4 ranks.
inline std::vector<TpCase> tp_cases(const std::vector<FixtureCase>& fixtures) {
  std::vector<TpCase> cases;
  for (const FixtureCase& c : fixtures)
    for (int tp : {2, 4}) cases.push_back({c, tp});
  return cases;
}

class TensorParallelCase : public ::testing::TestWithParam<TpCase> {
 protected:
  // The family's error for this fixture and size, or "" when it splits.
  virtual std::string split_error(const FixtureCase& c, int tp) const = 0;
  // The bound on the split model's logits' error, in logits_std of the fixture.
  virtual double tolerance(const FixtureCase&) const { return 1e-3; }

  void SetUp() override {
    const TpCase& p = GetParam();
    const std::string why = split_error(p.fixture, p.tp);
    if (!why.empty()) {
      try {
        load_tp(p.fixture, p.tp);
        ADD_FAILURE() << "load_model accepted a shape that does not split: " << why;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()), why);
      }
      GTEST_SKIP() << why;
    }
    whole = load_model(p.fixture.dir);
    split = load_tp(p.fixture, p.tp);
    prompt = p.fixture.reference["prompt"].get<std::vector<int32_t>>();
    std = p.fixture.reference["logits_std"].get<double>();
    n_vocab = size_t(whole->info().n_vocab);
  }
  void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
    ASSERT_EQ(got.size(), want.size());
    EXPECT_LT(max_error_rel_std(got.data(), want, std), tolerance(GetParam().fixture))
        << GetParam().fixture.name << " tp " << GetParam().tp << ": " << what;
  }
  // The last row's logits of `tokens` fed to `state`.
  std::vector<float> last(Model& m, SequenceState& state, std::span<const int32_t> tokens) {
    std::vector<float> out(n_vocab, NAN);
    m.forward(state, tokens, LogitsRows::Last, out.data());
    return out;
  }

  // The prompt's final hidden states (embeddings) are every rank's replicated residual stream:
  // the split model's equal the whole one's. Returns the two states (whole, split), which hold
  // the prompt.
  std::pair<std::unique_ptr<SequenceState>, std::unique_ptr<SequenceState>>
  expect_hidden_states_match() {
    const size_t H = size_t(whole->info().n_embd);
    std::vector<float> hw(prompt.size() * H), hs(hw.size(), NAN);
    auto c = whole->new_sequence(), d = split->new_sequence();
    whole->forward(*c, prompt, LogitsRows::Hidden, hw.data());
    split->forward(*d, prompt, LogitsRows::Hidden, hs.data());
    // Normalised rows (entries about 1): the ranks' partial sums add in another order, which
    // moves an entry by up to 1.04e-4 on a 16-core AMX host; a wrong split moves it by ~1.
    EXPECT_LT(max_error_rel_std(hs.data(), hw, 1.0), 1e-3) << "hidden states";
    return {std::move(c), std::move(d)};
  }

  // Two sequences stepped together (forward_batch): a prompt chunk and a decode token, logits
  // for both; then a step where both ask for a greedy pick; bad input is refused before any rank
  // starts, and the model keeps working.
  void expect_batch_of_two_matches() {
    const size_t half = std::max<size_t>(1, prompt.size() / 2);
    std::vector<std::unique_ptr<SequenceState>> w, s;
    for (Model* m : {whole.get(), split.get()}) {
      auto& v = m == whole.get() ? w : s;
      v.push_back(m->new_sequence());
      v.push_back(m->new_sequence());
      m->forward(*v[1], std::span<const int32_t>(prompt.data(), half), LogitsRows::None, nullptr);
    }
    const std::vector<int32_t> chunk(prompt.begin(), prompt.begin() + long(half));
    const std::vector<int32_t> token = {prompt[half]};
    std::vector<float> w0(n_vocab), w1(n_vocab), s0(n_vocab, NAN), s1(n_vocab, NAN);
    const Model::BatchItem wi[] = {{w[0].get(), chunk, w0.data()}, {w[1].get(), token, w1.data()}};
    const Model::BatchItem si[] = {{s[0].get(), chunk, s0.data()}, {s[1].get(), token, s1.data()}};
    whole->forward_batch(wi);
    split->forward_batch(si);
    expect_close(s0, w0, "batched prompt chunk");
    expect_close(s1, w1, "batched decode token");
    EXPECT_EQ(s[0]->n_past(), int64_t(half));
    EXPECT_EQ(s[1]->n_past(), int64_t(half + 1));
    TokenPick greedy;
    int32_t tw[2] = {-1, -1}, ts[2] = {-2, -2};
    const std::vector<int32_t> next = {1};
    const Model::BatchItem wp[] = {{w[0].get(), next, nullptr, &greedy, &tw[0]},
                                   {w[1].get(), next, nullptr, &greedy, &tw[1]}};
    const Model::BatchItem sp[] = {{s[0].get(), next, nullptr, &greedy, &ts[0]},
                                   {s[1].get(), next, nullptr, &greedy, &ts[1]}};
    whole->forward_batch(wp);
    split->forward_batch(sp);
    EXPECT_EQ(ts[0], tw[0]);
    EXPECT_EQ(ts[1], tw[1]);
    const std::vector<int32_t> bad = {int32_t(n_vocab)};
    EXPECT_THROW(split->forward(*s[0], bad, LogitsRows::Last, s0.data()), Error);
    EXPECT_EQ(s[0]->n_past(), int64_t(half + 1));
    EXPECT_NO_THROW(split->forward(*s[0], next, LogitsRows::Last, s0.data()));
  }

  std::unique_ptr<Model> whole, split;
  std::vector<int32_t> prompt;
  double std = 1.0;
  size_t n_vocab = 0;
};

// The engine over a split model (2 ranks), unchanged: n greedy requests (request i: the
// fixture's prompt repeated to first_len + 7·i tokens, 4 + more·i tokens to generate) run alone on
// the whole model's engine, then twice all together on the split one (prompt chunks and decode
// tokens sharing steps; the second pass through the prompt cache). Each gets the lone tokens,
// compared up to a tie between the two best (top-2 logprobs within 1e-3 of the logits' std)
// that rounding may break either way; the cache must hit and more than min_compared tokens must
// be compared.
inline void expect_split_engine_gives_lone_tokens(const FixtureCase& c, int n, size_t first_len,
                                                  int more, size_t min_compared) {
  EngineOptions o;
  o.model_dir = c.dir;
  o.prefill_chunk = 8;
  o.max_step_tokens = 24;
  Engine whole(load_model(c.dir), nullptr, ModelConfig::load(c.dir), o);
  Engine split(load_tp(c, 2), nullptr, ModelConfig::load(c.dir), o);
  const auto base = c.reference["prompt"].get<std::vector<int32_t>>();
  const double tol = 1e-3 * std::max(1.0, c.reference["logits_std"].get<double>());
  auto request = [&](int i) {
    GenerationRequest r;
    for (size_t k = 0; k < first_len + size_t(i * 7); ++k)
      r.prompt.push_back(base[k % base.size()]);
    r.max_tokens = 4 + more * i;
    r.sampling.temperature = 0.0f;
    r.ignore_eos = true;
    r.logprobs = 2;
    return r;
  };
  size_t compared = 0;  // tokens compared before a tie ended a request's comparison
  std::vector<GenerationResult> alone;
  for (int i = 0; i < n; ++i) alone.push_back(whole.generate(request(i)));
  for (int pass = 0; pass < 2; ++pass) {  // the second pass reuses the cached prompts
    std::mutex mu;
    std::condition_variable cv;
    std::vector<GenerationResult> got(static_cast<size_t>(n));
    int done = 0;
    for (int i = 0; i < n; ++i) {
      GenerationCallbacks cb;
      cb.on_done = [&, i](const GenerationResult& r) {
        std::lock_guard lock(mu);
        got[size_t(i)] = r;
        ++done;
        cv.notify_all();
      };
      split.submit(request(i), cb);
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done == n; });
    for (int i = 0; i < n; ++i) {
      const GenerationResult &a = alone[size_t(i)], &b = got[size_t(i)];
      ASSERT_EQ(b.finish_reason, "length") << c.name << " request " << i << ": " << b.error;
      ASSERT_EQ(b.tokens.size(), a.tokens.size());
      for (size_t k = 0; k < a.tokens.size(); ++k) {
        const auto& top = a.logprobs[k].top;
        if (top.size() == 2 && top[0].second - top[1].second < tol) break;  // a tie
        ASSERT_EQ(b.tokens[k], a.tokens[k])
            << c.name << " pass " << pass << " request " << i << " token " << k;
        ++compared;
      }
    }
  }
  EXPECT_GT(split.cache_stats().hits, 0u) << c.name;
  EXPECT_GT(compared, min_compared) << c.name << ": too many ties to compare";
}

}  // namespace hearth::test
