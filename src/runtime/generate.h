// Helpers around the generation loop (which is the engine's: runtime/engine.h): a chunked
// prefill, used by `hearth bench` and tests, and the sampling defaults of generation_config.json.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "loader/config.h"
#include "models/model.h"
#include "runtime/sampler.h"

namespace hearth {

// Runs tokens through the model in chunks of `chunk` tokens (0: the model's default); returns
// the logits of the last token if asked.
void prefill(Model& model, SequenceState& state, std::span<const int32_t> tokens, int64_t chunk,
             std::vector<float>* last_logits);

// Sampling defaults from generation_config.json, as Hugging Face applies them (greedy unless
// do_sample is true).
SamplingParams sampling_defaults(const ModelConfig& config);

}  // namespace hearth
