// What the tensor-parallel tests of every family share: a fixture split over tp ranks
// (load_tp), the parameter (fixture, tp), and a test base that loads the whole and the split
// model, or, where the family's check refuses the shape, checks the loader refuses it with the
// same error before reading a weight and skips.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "fixture.h"
#include "models/model.h"

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

}  // namespace hearth::test
