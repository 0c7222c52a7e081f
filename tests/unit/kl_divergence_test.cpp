// The KL-divergence base file and statistics (runtime/kl_divergence.h): a model against its own
// base gives KL 0 and full top-1 agreement, a perturbed one a positive KL that the K + 1-outcome
// formula computes exactly, and corrupt or mismatched base files are refused by name.
#include "runtime/kl_divergence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace hearth {
namespace {

constexpr int64_t kVocab = 1000, kCtx = 16, kChunks = 3, kFirst = 8, kTopK = 8;

struct ModelRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [kChunks, kCtx, kVocab]
};

ModelRun make_run(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  ModelRun r;
  r.tokens.resize(size_t(kChunks * kCtx));
  for (auto& t : r.tokens) t = int32_t(rng() % kVocab);
  r.logits.resize(size_t(kChunks * kCtx * kVocab));
  for (auto& v : r.logits) v = normal(rng);
  return r;
}

KlBaseShape shape() { return {kVocab, kCtx, kChunks, kFirst, kTopK}; }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("hearth_kl_" + name)).string();
}

void write_base(const ModelRun& run, const std::string& path) {
  KlBaseWriter w(path, shape(), run.tokens);
  for (int64_t c = 0; c < kChunks; ++c) {
    std::vector<KlBasePosition> ps;
    for (int64_t i = kFirst; i < kCtx - 1; ++i)
      ps.push_back(kl_base_position(run.logits.data() + (c * kCtx + i) * kVocab, kVocab,
                                    run.tokens[size_t(c * kCtx + i + 1)], kTopK));
    w.add_chunk(ps);
  }
  w.finish();
}

KlSummary compare(const ModelRun& base, const ModelRun& model, const std::string& path) {
  KlBaseReader reader(path);
  reader.check_matches(shape(), base.tokens);
  std::vector<KlPositionResult> results;
  for (int64_t c = 0; c < kChunks; ++c) {
    auto ps = reader.read_chunk();
    for (int64_t i = kFirst; i < kCtx - 1; ++i)
      results.push_back(kl_compare_position(ps[size_t(i - kFirst)],
                                            model.logits.data() + (c * kCtx + i) * kVocab, kVocab,
                                            model.tokens[size_t(c * kCtx + i + 1)]));
  }
  return kl_summarize(results);
}

TEST(KlDivergence, ModelAgainstItsOwnBaseIsZero) {
  const ModelRun run = make_run(1);
  const std::string path = temp_path("self");
  write_base(run, path);
  const KlSummary s = compare(run, run, path);
  EXPECT_EQ(s.count, kChunks * (kCtx - 1 - kFirst));
  EXPECT_EQ(s.kl_mean, 0.0);
  EXPECT_EQ(s.kl_max, 0.0);
  EXPECT_EQ(s.same_top, 1.0);
  EXPECT_NEAR(s.ppl_ratio, 1.0, 1e-6);
  EXPECT_NEAR(s.ppl, s.ppl_base, 1e-4 * s.ppl);
  std::filesystem::remove(path);
}

// KL over the base's top K and the rest, in double from the logits of both models.
double reference_kl(const float* p_logits, const float* q_logits, const std::vector<int32_t>& top) {
  auto log_softmax = [](const float* l) {
    double m = l[0], sum = 0;
    for (int64_t v = 0; v < kVocab; ++v) m = std::max(m, double(l[v]));
    for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(l[v] - m);
    std::vector<double> out(static_cast<size_t>(kVocab));
    for (int64_t v = 0; v < kVocab; ++v) out[size_t(v)] = l[v] - m - std::log(sum);
    return out;
  };
  const auto lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double kl = 0, p_top = 0, q_top = 0;
  for (int32_t id : top) {
    kl += std::exp(lp[size_t(id)]) * (lp[size_t(id)] - lq[size_t(id)]);
    p_top += std::exp(lp[size_t(id)]);
    q_top += std::exp(lq[size_t(id)]);
  }
  return kl + (1 - p_top) * std::log((1 - p_top) / (1 - q_top));
}

TEST(KlDivergence, PerturbedModelHasPositiveKlAsComputedInDouble) {
  const ModelRun base = make_run(2);
  ModelRun model = base;
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  for (auto& v : model.logits) v += noise(rng);
  const std::string path = temp_path("perturbed");
  write_base(base, path);
  const KlSummary s = compare(base, model, path);
  EXPECT_GT(s.kl_min, 0.0);
  EXPECT_LT(s.same_top, 1.0);
  EXPECT_NE(s.ppl_ratio, 1.0);
  // The first scored position against the formula in double.
  const float* p = base.logits.data() + kFirst * kVocab;
  const KlBasePosition bp = kl_base_position(p, kVocab, base.tokens[kFirst + 1], kTopK);
  const KlPositionResult r = kl_compare_position(bp, model.logits.data() + kFirst * kVocab, kVocab,
                                                 base.tokens[kFirst + 1]);
  const double want = reference_kl(p, model.logits.data() + kFirst * kVocab, bp.ids);
  EXPECT_NEAR(r.kl, want, 1e-5 + 1e-4 * want);
  EXPECT_LE(s.kl_median, s.kl_p99);
  EXPECT_LE(s.kl_p99, s.kl_p999);
  EXPECT_LE(s.kl_p999, s.kl_max);
  std::filesystem::remove(path);
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(KlDivergence, CorruptAndMismatchedBaseFilesAreRefused) {
  const ModelRun run = make_run(3);
  const std::string path = temp_path("bad");
  write_base(run, path);
  const auto size = std::filesystem::file_size(path);
  // Another text, context, vocabulary or scoring mode.
  KlBaseReader reader(path);
  std::vector<int32_t> other = run.tokens;
  other[20] = (other[20] + 1) % kVocab;
  expect_error([&] { reader.check_matches(shape(), other); }, "token 20 differs");
  KlBaseShape s = shape();
  s.ctx = 32;
  expect_error([&] { reader.check_matches(s, run.tokens); }, "--ctx");
  s = shape();
  s.n_vocab = 999;
  expect_error([&] { reader.check_matches(s, run.tokens); }, "vocabulary");
  s = shape();
  s.first_scored = 0;
  expect_error([&] { reader.check_matches(s, run.tokens); }, "--score-all");
  // Truncated.
  std::filesystem::resize_file(path, size - 4);
  expect_error([&] { KlBaseReader r(path); }, "truncated or corrupt");
  // Not a base file.
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "not a base file at all, just some text";
  }
  expect_error([&] { KlBaseReader r(path); }, "not a hearth KL base file");
  expect_error([&] { KlBaseReader r(temp_path("missing")); }, "cannot read");
  std::filesystem::remove(path);
  // A writer destroyed before finish() leaves no file behind.
  { KlBaseWriter w(path, shape(), run.tokens); }
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace hearth
