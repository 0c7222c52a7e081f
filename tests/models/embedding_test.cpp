// Embeddings: the hidden states behind them checked against the transformers fixtures (the
// head applied to them gives the reference logits), bare base-model checkpoints (names without
// "model.", no LM head), and the engine computing embeddings between the steps of running
// requests without disturbing them.
#include "runtime/embedding.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/dtype.h"
#include "core/error.h"
#include "fixture.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"
#include "models/model.h"
#include "runtime/engine.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

std::vector<float> to_f32(const TensorInfo& t) {
  std::vector<float> out(t.nbytes / dtype_size(t.dtype));
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < out.size(); ++i) {
    if (t.dtype == DType::BF16) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = bf16_to_f32(v);
    } else if (t.dtype == DType::F32) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else {
      ADD_FAILURE() << t.name << ": unexpected dtype";
    }
  }
  return out;
}

std::vector<float> hidden_states(Model& model, const std::vector<int32_t>& tokens) {
  std::vector<float> hidden(tokens.size() * size_t(model.info().n_embd), NAN);
  auto state = model.new_sequence();
  model.forward(*state, tokens, LogitsRows::Hidden, hidden.data());
  return hidden;
}

class HiddenStates : public ::testing::TestWithParam<const char*> {};

// logits = hidden · headᵀ for models whose logits are not scaled or capped: the hidden states
// are right when the head applied to them gives transformers' logits.
TEST_P(HiddenStates, TheHeadOfThemIsTheReferenceLogits) {
  const std::string dir = test::fixture_root() + "/" + GetParam();
  auto model = load_model(dir);
  std::ifstream ref_in(dir + "/reference.json");
  const auto reference = nlohmann::json::parse(ref_in);
  const auto prompt = reference["prompt"].get<std::vector<int32_t>>();
  const int64_t n = int64_t(prompt.size()), H = model->info().n_embd, V = model->info().n_vocab;
  const std::vector<float> hidden = hidden_states(*model, prompt);

  const WeightStore store = WeightStore::open(dir);
  const TensorInfo* head = store.find("lm_head.weight");
  if (!head) head = store.find("model.embed_tokens.weight");
  ASSERT_NE(head, nullptr);
  const std::vector<float> w = to_f32(*head);
  ASSERT_EQ(int64_t(w.size()), V * H);
  std::vector<float> logits(size_t(n * V));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t v = 0; v < V; ++v) {
      double dot = 0;
      for (int64_t i = 0; i < H; ++i)
        dot += double(hidden[size_t(t * H + i)]) * w[size_t(v * H + i)];
      logits[size_t(t * V + v)] = float(dot);
    }
  const NpyArray want = npy_read(dir + "/logits.npy");
  const double err =
      test::max_error_rel_std(logits.data(), want.f32, reference["logits_std"].get<double>());
  EXPECT_LT(err, 2e-3) << GetParam() << ": max |head(hidden) - reference logits| / std";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HiddenStates,
                         ::testing::Values("llama", "llama_tied", "qwen3", "qwen3_5_text"));

// A copy of a fixture checkpoint saved as a bare base model: "model." left off every name, and
// no lm_head.weight.
void write_bare_copy(const std::string& from, const fs::path& to, bool keep_head) {
  fs::create_directories(to);
  fs::copy_file(from + "/config.json", to / "config.json");
  const WeightStore store = WeightStore::open(from);
  std::vector<SafetensorsEntry> entries;
  std::vector<std::pair<std::string, const TensorInfo*>> tensors;
  for (const auto& name : store.names()) {
    if (name == "lm_head.weight" && !keep_head) continue;
    const TensorInfo* t = store.find(name);
    const std::string bare = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
    entries.push_back({bare, t->dtype, t->shape});
    tensors.emplace_back(bare, t);
  }
  SafetensorsWriter writer(to, entries);
  for (const auto& [name, t] : tensors) writer.write(name, t->data, t->nbytes);
  writer.finish();
}

TEST(BareBaseModel, LoadsWithTheSameHiddenStates) {
  const fs::path dir = fs::temp_directory_path() / ("hearth_bare_" + std::to_string(getpid()));
  const std::string fixture = test::fixture_root() + "/llama_tied";
  write_bare_copy(fixture, dir, true);
  const std::vector<int32_t> tokens = {1, 5, 9, 200, 3};
  auto original = load_model(fixture);
  auto bare = load_model(dir);
  EXPECT_EQ(hidden_states(*bare, tokens), hidden_states(*original, tokens));
  EXPECT_TRUE(bare->info().generates);
  fs::remove_all(dir);
}

TEST(BareBaseModel, WithoutAHeadItEmbedsButRefusesToGenerate) {
  const fs::path dir = fs::temp_directory_path() / ("hearth_headless_" + std::to_string(getpid()));
  const std::string fixture = test::fixture_root() + "/llama";  // untied: lm_head is its own
  write_bare_copy(fixture, dir, false);
  EngineOptions eo;
  eo.model_dir = dir.string();
  auto engine = Engine::load(eo);
  EXPECT_FALSE(engine->info().generates);
  const std::vector<int32_t> tokens = {1, 5, 9, 200, 3};
  auto reference = load_model(fixture);
  const std::vector<float> hidden = hidden_states(*reference, tokens);
  EmbeddingConfig mean;
  EXPECT_EQ(engine->embed(tokens), pool_hidden_states(hidden, 5, reference->info().n_embd, mean));
  GenerationRequest r;
  r.prompt = tokens;
  r.max_tokens = 2;
  try {
    engine->validate(r);
    ADD_FAILURE() << "a model without a head accepted a generation";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("without an LM head"), std::string::npos) << e.what();
  }
  engine.reset();
  fs::remove_all(dir);
}

// Embeddings run between the steps of generating requests: each side gets what it gets alone.
TEST(EngineEmbed, BetweenStepsOfRunningRequestsChangesNothing) {
  const std::string fixture = test::fixture_root() + "/qwen3_5_text";
  EngineOptions eo;
  eo.model_dir = fixture;
  eo.cache_bytes = 0;
  auto engine = Engine::load(eo);
  const std::vector<int32_t> text = {3, 17, 42, 99, 7, 8, 1};
  const std::vector<float> alone = engine->embed(text);

  GenerationRequest r;
  r.prompt = {5, 6, 7, 8};
  r.max_tokens = 64;
  r.ignore_eos = true;
  r.sampling.temperature = 0.0f;
  const GenerationResult solo = engine->generate(r);
  GenerationResult together;
  std::thread gen([&] { together = engine->generate(r); });
  std::vector<std::vector<float>> during;
  for (int i = 0; i < 4; ++i) during.push_back(engine->embed(text));
  gen.join();
  EXPECT_EQ(together.tokens, solo.tokens);
  for (const auto& v : during) EXPECT_EQ(v, alone);
  double norm = 0;
  for (float x : alone) norm += double(x) * x;
  EXPECT_NEAR(norm, 1.0, 1e-5) << "normalised by default";
}

TEST(EngineEmbed, BadInputsAreErrorsNamingTheProblem) {
  EngineOptions eo;
  eo.model_dir = test::fixture_root() + "/qwen3";
  auto engine = Engine::load(eo);
  auto message = [&](std::vector<int32_t> tokens) {
    try {
      engine->embed(tokens);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({}).find("empty"), std::string::npos);
  EXPECT_NE(message({1, -3}).find("out of range"), std::string::npos);
  EXPECT_NE(message({1, int32_t(engine->info().n_vocab)}).find("out of range"), std::string::npos);
  EXPECT_NE(message(std::vector<int32_t>(size_t(engine->n_ctx()) + 1, 1)).find("context"),
            std::string::npos);
}

}  // namespace
}  // namespace hearth
