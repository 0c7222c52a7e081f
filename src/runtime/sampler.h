// Sampling chain, in Hugging Face's order: repetition penalty, presence/frequency penalties,
// logit bias, then (unless greedy) temperature, top-k, top-p, min-p, and a draw from the
// remaining distribution. temperature <= 0 is greedy (argmax; ties go to the lowest id).
// A seeded sampler is deterministic: the same seed, prompt and parameters give the same tokens.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace hearth {

struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // 1 = off (HF: divides positive logits, multiplies negative)
  float presence_penalty = 0.0f;    // OpenAI: subtracted once per token present
  float frequency_penalty = 0.0f;   // OpenAI: subtracted per occurrence
  int penalty_last_n = 0;           // window of recent tokens the penalties see; 0 = all
  std::map<int32_t, float> logit_bias;
  std::optional<uint64_t> seed;  // none: seeded from the OS

  // Throws hearth::Error naming the parameter when a value is impossible.
  void validate(int64_t n_vocab) const;
};

// The sampling fields a request or command line gave; unset ones keep the defaults (the model's
// generation_config.json). Shared by the CLI and the server.
struct SamplingOverrides {
  std::optional<float> temperature, top_p, min_p, repetition_penalty, presence_penalty,
      frequency_penalty;
  std::optional<int> top_k, penalty_last_n;
  std::optional<uint64_t> seed;
  std::map<int32_t, float> logit_bias;  // added to (replacing equal ids of) the defaults'

  SamplingParams apply(SamplingParams defaults) const;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t n_vocab);
  // Picks the next token; `history` holds the prompt and generated tokens so far.
  // Modifies logits in place.
  int32_t sample(std::span<float> logits, std::span<const int32_t> history);

  // True when sample() needs nothing but the logits (no penalties, no logit bias): then the
  // backend can pick the token where the logits are (Model::forward_pick) with next_pick().
  bool backend_can_pick() const;
  // The truncation settings and this step's random draw (consumes the RNG as sample() would).
  TokenPick next_pick();

 private:
  void apply_penalties(std::span<float> logits, std::span<const int32_t> history);

  SamplingParams params_;
  int64_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
  std::vector<int32_t> counts_;
};

}  // namespace hearth
