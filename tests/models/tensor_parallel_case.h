// What the tensor-parallel tests of every family share: a fixture split over tp ranks
// (load_tp), the parameter (fixture, tp), and a test base that loads the whole and the split
// model, or, where the family's check refuses the shape, checks the loader refuses it with the
// same error before reading a weight and skips.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "fixture.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace hearth::test {

inline std::unique_ptr<Model> load_tp(const FixtureCase& c, int tp) {
  LoadOptions options;
  options.tensor_parallel = tp;
  return load_model(c.dir, options);
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

  std::unique_ptr<Model> whole, split;
  std::vector<int32_t> prompt;
  double std = 1.0;
  size_t n_vocab = 0;
};

// The engine over a split model, unchanged: requests 0..n-1 (`request(i)`) run alone on
// `whole`, then twice all together on `split` (the second pass through the prompt cache); each
// gets the lone tokens, compared up to a tie between the two best (top-2 logprobs within `tol`)
// that rounding may break either way. Adds the tokens compared to *compared.
inline void expect_split_engine_gives_lone_tokens(
    Engine& whole, Engine& split, int n, const std::function<GenerationRequest(int)>& request,
    double tol, const std::string& name, size_t* compared) {
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
      ASSERT_EQ(b.finish_reason, "length") << name << " request " << i << ": " << b.error;
      ASSERT_EQ(b.tokens.size(), a.tokens.size());
      for (size_t k = 0; k < a.tokens.size(); ++k) {
        const auto& top = a.logprobs[k].top;
        if (top.size() == 2 && top[0].second - top[1].second < tol) break;  // a tie
        ASSERT_EQ(b.tokens[k], a.tokens[k])
            << name << " pass " << pass << " request " << i << " token " << k;
        ++*compared;
      }
    }
  }
}

}  // namespace hearth::test
