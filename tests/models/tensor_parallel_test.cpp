// Tensor parallelism on the CPU (models/tensor_parallel.h): for every llama-family fixture whose
// shape divides, the model split over 2 and 4 ranks gives the logits of the whole model within
// the fixture's tolerance — prefill, decode steps, and two sequences stepped together — and a
// shape that does not divide, a quantization group cut in two, or a GPU is refused by name.
// (The Qwen3.5 family: tensor_parallel_qwen3_5_test.cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "backend/cpu/affine_matvec.h"
#include "core/error.h"
#include "fixture.h"
#include "loader/config.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"
#include "models/llama.h"
#include "models/model.h"
#include "quant/quantize_checkpoint.h"
#include "runtime/engine.h"
#include "tensor_parallel_case.h"

namespace hearth {
namespace {

using test::FixtureCase;
using test::load_tp;
using test::TpCase;

std::vector<FixtureCase> llama_cases() { return test::fixture_cases(test::llama_fixture_types()); }

// The error check_llama_tensor_parallel gives for this fixture and size, or "" when it splits.
std::string split_error(const FixtureCase& c, int tp) {
  try {
    check_llama_tensor_parallel(llama_descriptor_from_config(ModelConfig::load(c.dir)), tp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class TensorParallel : public test::TensorParallelCase {
 protected:
  std::string split_error(const FixtureCase& c, int tp) const override {
    return hearth::split_error(c, tp);
  }
};

TEST_P(TensorParallel, PrefillAndDecodeMatchTheWholeModel) {
  EXPECT_NE(split->info().architecture.find("tensor parallel"), std::string::npos);
  EXPECT_EQ(split->info().n_vocab, whole->info().n_vocab);
  EXPECT_EQ(split->info().n_params, whole->info().n_params);
  auto a = whole->new_sequence(), b = split->new_sequence();
  std::vector<float> want(prompt.size() * n_vocab), got(want.size(), NAN);
  whole->forward(*a, prompt, LogitsRows::All, want.data());
  split->forward(*b, prompt, LogitsRows::All, got.data());
  expect_close(got, want, "prefill");
  EXPECT_EQ(b->n_past(), int64_t(prompt.size()));
  std::vector<float> one(n_vocab), mine(n_vocab);
  int32_t t = int32_t(std::max_element(want.end() - long(n_vocab), want.end()) -
                      (want.end() - long(n_vocab)));
  for (int step = 0; step < 3; ++step) {
    whole->forward(*a, std::span<const int32_t>(&t, 1), LogitsRows::Last, one.data());
    split->forward(*b, std::span<const int32_t>(&t, 1), LogitsRows::Last, mine.data());
    expect_close(mine, one, "decode step " + std::to_string(step));
    t = int32_t(std::max_element(one.begin(), one.end()) - one.begin());
  }
  auto [c, d] = expect_hidden_states_match();
  // Going back and sharing keep every rank's state in step.
  ASSERT_TRUE(d->truncate(2));
  auto e = d->share();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->n_past(), 2);
  EXPECT_GT(e->bytes(), size_t(0));
  ASSERT_TRUE(c->truncate(2));  // the same on the whole model (dynamic rope follows lengths)
  auto g = c->share();
  ASSERT_TRUE(g);
  std::vector<float> again(n_vocab), ref(n_vocab);
  split->forward(*e, std::span<const int32_t>(&prompt[2], 1), LogitsRows::Last, again.data());
  whole->forward(*g, std::span<const int32_t>(&prompt[2], 1), LogitsRows::Last, ref.data());
  expect_close(again, ref, "after truncate and share");
}

// Two sequences stepped together (TensorParallelCase::expect_batch_of_two_matches).
TEST_P(TensorParallel, BatchOfTwoMatchesTheWholeModel) { expect_batch_of_two_matches(); }

INSTANTIATE_TEST_SUITE_P(Fixtures, TensorParallel,
                         ::testing::ValuesIn(test::tp_cases(llama_cases())), [](const auto& info) {
                           return info.param.fixture.name + "_tp" + std::to_string(info.param.tp);
                         });

FixtureCase fixture(const std::string& name) {
  for (const FixtureCase& c : test::fixture_cases({}))
    if (c.name == name) return c;
  throw Error("no fixture " + name);
}

TEST(TensorParallelLoad, ShapesThatDoNotDivideAreRefusedByName) {
  const FixtureCase llama = fixture("llama");  // 4 heads, 2 KV heads, intermediate 96
  try {
    load_tp(llama, 3);
    ADD_FAILURE() << "3 ranks accepted for 4 heads";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("num_attention_heads (4)"), std::string::npos) << m;
    EXPECT_NE(m.find("vLLM"), std::string::npos) << m;
  }
  LlamaDescriptor d = llama_descriptor_from_config(ModelConfig::load(llama.dir));
  d.n_head = 8;
  d.n_head_kv = 6;  // neither 6 % 4 nor 4 % 6
  EXPECT_THROW(check_llama_tensor_parallel(d, 4), Error);
  d.n_head_kv = 8;
  d.n_ff = 90;
  try {
    check_llama_tensor_parallel(d, 4);
    ADD_FAILURE() << "intermediate_size 90 accepted for 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("intermediate_size (90)"), std::string::npos);
  }
  d.n_ff = 96;
  EXPECT_NO_THROW(check_llama_tensor_parallel(d, 4));
  EXPECT_THROW(check_llama_tensor_parallel(d, 0), Error);
  LoadOptions zero;
  zero.tensor_parallel = 0;
  EXPECT_THROW(load_model(llama.dir, zero), Error);
}

TEST(TensorParallelLoad, GpusAreRefused) {
  LoadOptions gpu;
  gpu.device = "cuda";
  gpu.tensor_parallel = 2;
  try {
    load_model(fixture("llama").dir, gpu);
    ADD_FAILURE() << "tensor parallelism accepted on a GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multi-GPU tensor parallelism is not built yet"),
              std::string::npos)
        << e.what();
  }
}

// The engine over a split model, unchanged: requests stepped together (prompt chunks and decode
// tokens sharing steps) and again through the prompt cache (shared, truncated states) get the
// tokens the whole model gives each alone, up to a tie between the two best that rounding may
// break either way.
TEST(TensorParallelEngine, BatchedAndCachedRequestsGetTheWholeModelsTokens) {
  for (const char* name : {"llama", "qwen3", "gemma2"})
    test::expect_split_engine_gives_lone_tokens(fixture(name), 5, 5, 1, 20);
}

// Stand-in rank models of a 10-token vocabulary: a rank's logits are 100 * rank + the column,
// and rank 1 runs out of memory at its `fail_at`-th forward, where the others advance their
// states.
class ScriptedRank final : public Model {
 public:
  ScriptedRank(int rank, int world, Communicator& comm, int fail_at)
      : rank_(rank), world_(world), comm_(comm), fail_at_(fail_at) {
    info_.n_vocab = 10;
    info_.n_embd = 2;
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence() const override {
    return std::make_unique<Positions>();
  }
  void forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
               float* logits) override {
    comm_.barrier();  // a collective before the failure, as a layer's all-reduce would be
    if (++calls_ == fail_at_ && rank_ == 1) throw OutOfMemory("rank 1 is out of memory");
    static_cast<Positions&>(state).n += int64_t(tokens.size());
    const ShardRange cols = shard_range(info_.n_vocab, rank_, world_);
    const int64_t n_rows = rows == LogitsRows::Last ? 1 : int64_t(tokens.size());
    for (int64_t r = 0; r < n_rows && rows != LogitsRows::None; ++r)
      for (int64_t c = 0; c < cols.size(); ++c)
        logits[r * cols.size() + c] = float(100 * rank_ + cols.begin + c);
  }

 private:
  struct Positions final : SequenceState {
    int64_t n = 0;
    int64_t n_past() const override { return n; }
    bool truncate(int64_t to) override { return to <= n ? (n = to, true) : false; }
    size_t bytes() const override { return size_t(n); }
    size_t bytes_after(int64_t more) const override { return size_t(n + more); }
  };
  int rank_, world_;
  Communicator& comm_;
  int fail_at_, calls_ = 0;
  ModelInfo info_;
};

TEST(TensorParallelModel, GathersLogitsAndSurvivesAFailingRank) {
  auto model = make_tensor_parallel_model(3, [](int rank, Communicator& comm) {
    return std::make_unique<ScriptedRank>(rank, 3, comm, /*fail_at=*/2);
  });
  auto a = model->new_sequence();
  const std::vector<int32_t> two = {1, 2};
  std::vector<float> logits(2 * 10, NAN);
  model->forward(*a, two, LogitsRows::All, logits.data());
  // Vocabulary parts [0, 3), [3, 6), [6, 10) from ranks 0, 1, 2.
  const std::vector<float> row = {0, 1, 2, 103, 104, 105, 206, 207, 208, 209};
  EXPECT_EQ(std::vector<float>(logits.begin(), logits.begin() + 10), row);
  EXPECT_EQ(std::vector<float>(logits.begin() + 10, logits.end()), row);
  EXPECT_EQ(a->n_past(), 2);
  EXPECT_EQ(a->bytes(), size_t(6));  // each rank's state counted
  // Rank 1 fails after the others took a step: the caller gets its OutOfMemory (the engine
  // preempts on that type), not the others' abandoned collectives.
  EXPECT_THROW(model->forward(*a, two, LogitsRows::Last, logits.data()), OutOfMemory);
  // The state's ranks now disagree: refused, not run.
  try {
    model->forward(*a, two, LogitsRows::Last, logits.data());
    ADD_FAILURE() << "a state whose ranks disagree ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("failed part way"), std::string::npos) << e.what();
  }
  // Other sequences carry on.
  auto b = model->new_sequence();
  model->forward(*b, two, LogitsRows::Last, logits.data());
  EXPECT_EQ(std::vector<float>(logits.begin(), logits.begin() + 10), row);
}

// A vocabulary that does not divide among the ranks (255 over 2: 127 and 128 rows) still gives
// the whole model's logits: the llama fixture with its last vocabulary row cut off.
TEST(TensorParallelLoad, UnevenVocabularySplits) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hearth_tp_vocab_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const FixtureCase llama = fixture("llama");
  nlohmann::json config = ModelConfig::load(llama.dir).raw();
  constexpr int64_t kVocab = 255;
  config["vocab_size"] = kVocab;
  std::ofstream(dir / "config.json") << config.dump();
  WeightStore in = WeightStore::open(llama.dir);
  std::vector<SafetensorsEntry> entries;
  for (const std::string& name : in.names()) {
    const TensorInfo& t = *in.find(name);
    std::vector<int64_t> shape = t.shape;
    if (shape[0] == 256 && (name.find("embed_tokens") != name.npos || name == "lm_head.weight"))
      shape[0] = kVocab;
    entries.push_back({name, t.dtype, shape});
  }
  {
    SafetensorsWriter out(dir, entries);
    for (const SafetensorsEntry& e : entries) out.write(e.name, in.find(e.name)->data, e.nbytes());
    out.finish();
  }
  LoadOptions two;
  two.tensor_parallel = 2;
  auto whole = load_model(dir), split = load_model(dir, two);
  ASSERT_EQ(split->info().n_vocab, kVocab);
  std::vector<int32_t> prompt = llama.reference["prompt"].get<std::vector<int32_t>>();
  for (int32_t& t : prompt) t %= int32_t(kVocab);
  prompt.back() = int32_t(kVocab - 1);  // the last row of the last rank's part
  auto [a, b, want, got] = test::prefill_side_by_side(*whole, *split, prompt);
  EXPECT_LT(test::max_error_rel_std(got.data(), want, llama.reference["logits_std"].get<double>()),
            1e-3);
  fs::remove_all(dir);
}

// Affine (quantized) weights shard along their groups: column-parallel rows and vocabulary rows
// are views, row-parallel columns whole groups. A split that would cut a group is refused naming
// the tensor (the fixture's intermediate_size 96 over 2 ranks is 48 inputs each, groups of 32);
// with down_proj kept in float the rest splits, and gives the whole quantized model's logits up
// to the int8 rounding of activations that 4-bit products get on CPUs with the kernels (the
// whole model's o_proj takes that path, a rank's 32 inputs do not: packed_weights_test.cpp
// bounds that rounding the same way).
TEST(TensorParallelLoad, AffineWeightsShardAlongTheirGroups) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hearth_tp_test_" + std::to_string(getpid()));
  fs::remove_all(dir);
  const FixtureCase llama = fixture("llama");
  quant::QuantizeOptions q;
  q.spec.params = {4, 32};
  q.n_threads = 1;
  quant::quantize_checkpoint(llama.dir, dir / "q4", q);
  q.spec.overrides = quant::parse_module_bits("mlp.down_proj=false");
  quant::quantize_checkpoint(llama.dir, dir / "q4_dense_down", q);
  LoadOptions options;
  options.tensor_parallel = 2;
  try {
    load_model(dir / "q4", options);
    ADD_FAILURE() << "a quantization group was cut";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mlp.down_proj.weight: its 96 inputs split over 2 ranks give 48 each, not "
                     "whole quantization groups of 32"),
              std::string::npos)
        << m;
  }
  auto whole = load_model(dir / "q4_dense_down");
  auto split = load_model(dir / "q4_dense_down", options);
  EXPECT_NE(split->info().formats.find("affine 4-bit g32"), std::string::npos);
  const auto prompt = llama.reference["prompt"].get<std::vector<int32_t>>();
  auto [a, b, want, got] = test::prefill_side_by_side(*whole, *split, prompt);
  double scale = 0, err2 = 0, ref2 = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    scale = std::max(scale, double(std::fabs(want[i])));
    err2 += d * d;
    ref2 += double(want[i]) * want[i];
    worst = std::max(worst, std::isnan(d) ? INFINITY : std::fabs(d));
  }
  if (cpu::detail::affine_int8_isas(4).empty()) {
    EXPECT_LT(worst / llama.reference["logits_std"].get<double>(), 1e-3);
  } else {
    EXPECT_LE(worst, 1e-1 * scale);
    EXPECT_LE(std::sqrt(err2 / ref2), 5e-2);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hearth
