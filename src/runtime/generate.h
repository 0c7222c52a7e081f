// The generation loop for one sequence: chunked prefill, then sample/decode until EOS, a stop
// token, max_tokens, or the caller's callback says stop. Timings are measured here so that every
// front end (CLI, server, bench) reports the same numbers.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "loader/config.h"
#include "models/model.h"
#include "runtime/sampler.h"

namespace hearth {

struct GenerateParams {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  int64_t prefill_chunk = 0;  // tokens per prefill forward (bounds scratch memory); 0: the model's
                              // default (Model::default_prefill_chunk)
};

struct GenerateTimings {
  int64_t prompt_tokens = 0;
  double prompt_ms = 0.0;  // prefill up to the first sampled token
  int64_t generated_tokens = 0;
  double generate_ms = 0.0;  // after the first token
  double prompt_tokens_per_s() const { return prompt_ms > 0 ? prompt_tokens * 1e3 / prompt_ms : 0; }
  double generate_tokens_per_s() const {
    return generate_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1e3 / generate_ms : 0;
  }
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop" (EOS / stop token), "length", or "cancelled"
  GenerateTimings timings;
};

// Called with each new token; return false to stop (finish_reason "cancelled").
using TokenCallback = std::function<bool(int32_t token)>;

// Runs tokens through the model in chunks of `chunk` tokens (0: the model's default); returns
// the logits of the last token if asked.
void prefill(Model& model, SequenceState& state, std::span<const int32_t> tokens, int64_t chunk,
             std::vector<float>* last_logits);

// Generates after `prompt` (which must be non-empty) on a state whose n_past() is 0 or a prefix
// of the prompt already processed (the prompt cache). Afterwards the state holds the prompt and
// every generated token but the last; where the model picks ahead (Model::picks_ahead) and the
// loop ended on a stop token or the callback, a state that cannot be cut back (recurrent
// layers) holds the last token too.
GenerateResult generate(Model& model, SequenceState& state, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TokenCallback& on_token = {});

// Sampling defaults from generation_config.json, as Hugging Face applies them (greedy unless
// do_sample is true).
SamplingParams sampling_defaults(const ModelConfig& config);

}  // namespace hearth
