// Reference fixtures made by tools/fixtures/make_fixtures.py with Hugging Face transformers
// (float32 on bf16 weights): tests/data/models/<case>/{config.json, model.safetensors,
// reference.json, logits.npy}, listed in tests/data/models/manifest.json.
#pragma once
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "loader/npy.h"
#include "models/llama.h"
#include "models/model.h"
#include "reference_loop.h"

namespace hearth::test {

struct FixtureCase {
  std::string name;
  std::string model_type;
  std::string dir;
  nlohmann::json reference;
};

inline std::string fixture_root() { return std::string(HEARTH_TEST_DATA) + "/models"; }

inline void PrintTo(const FixtureCase& c, std::ostream* os) { *os << c.name; }

// The model_types the llama-family decoder loads, and gemma3 (a multimodal wrapper whose text
// model is gemma3_text).
inline std::vector<std::string> llama_fixture_types() {
  std::vector<std::string> types = llama_model_types();
  types.push_back("gemma3");
  return types;
}

// Cases whose model_type is in `types` (all cases when empty).
inline std::vector<FixtureCase> fixture_cases(const std::vector<std::string>& types) {
  std::ifstream in(fixture_root() + "/manifest.json");
  auto manifest = nlohmann::json::parse(in);
  std::vector<FixtureCase> cases;
  for (auto& [name, entry] : manifest["cases"].items()) {
    FixtureCase c;
    c.name = name;
    c.model_type = entry["model_type"].get<std::string>();
    bool wanted = types.empty();
    for (const auto& t : types) wanted |= t == c.model_type;
    if (!wanted) continue;
    c.dir = fixture_root() + "/" + entry["dir"].get<std::string>();
    std::ifstream ref(c.dir + "/reference.json");
    c.reference = nlohmann::json::parse(ref);
    cases.push_back(std::move(c));
  }
  return cases;
}

// max |a - b| over the reference's standard deviation.
// The greedy continuation of `prompt`, n tokens long (end of sequence ignored), as the
// reference's "greedy" list was made.
inline std::vector<int32_t> greedy_tokens(Model& model, const std::vector<int32_t>& prompt,
                                          size_t n) {
  GenerateParams params;
  params.max_tokens = int64_t(n);
  params.ignore_eos = true;
  params.sampling.temperature = 0.0f;
  auto state = model.new_sequence();
  return generate(model, *state, prompt, params).tokens;
}

// The decode loop twice from `prompt`, n tokens each, the pick's draws from `u_seed`: one step
// at a time (forward_pick), and with each step queued before the previous one's token is taken
// (queue_pick with Model::kPickedToken, take_pick). Returns {one at a time, picked ahead}.
inline std::pair<std::vector<int32_t>, std::vector<int32_t>> decode_both_ways(
    Model& model, const std::vector<int32_t>& prompt, int n, TokenPick pick, uint32_t u_seed) {
  std::vector<int32_t> plain, ahead;
  std::mt19937 rng_plain(u_seed), rng_ahead(u_seed);
  auto draw = [](std::mt19937& rng) { return std::uniform_real_distribution<double>(0, 1)(rng); };
  auto a = model.new_sequence(), b = model.new_sequence();
  pick.u = draw(rng_plain);
  int32_t t = model.forward_pick(*a, prompt, pick);
  for (int i = 0; i < n; ++i) {
    plain.push_back(t);
    pick.u = draw(rng_plain);
    t = model.forward_pick(*a, std::span<const int32_t>(&t, 1), pick);
  }
  pick.u = draw(rng_ahead);
  int32_t first = model.forward_pick(*b, prompt, pick);
  ahead.push_back(first);
  pick.u = draw(rng_ahead);
  model.queue_pick(*b, first, pick);
  for (int i = 1; i < n; ++i) {
    pick.u = draw(rng_ahead);
    model.queue_pick(*b, Model::kPickedToken, pick);
    ahead.push_back(model.take_pick());
  }
  model.take_pick();  // the step past the n-th token
  return {plain, ahead};
}

inline double max_error_rel_std(const float* got, const std::vector<float>& want, double std) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    double e = std::fabs(double(got[i]) - double(want[i]));
    if (std::isnan(got[i])) e = INFINITY;
    worst = std::max(worst, e);
  }
  return worst / std;
}

}  // namespace hearth::test
