#include "runtime/generate.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace hearth {

void prefill(Model& model, SequenceState& state, std::span<const int32_t> tokens, int64_t chunk,
             std::vector<float>* last_logits) {
  chunk = chunk > 0 ? chunk : model.default_prefill_chunk();
  const int64_t n = int64_t(tokens.size());
  if (last_logits) last_logits->resize(size_t(model.info().n_vocab));
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    const bool last = end == n && last_logits;
    model.forward(state, tokens.subspan(size_t(begin), size_t(end - begin)),
                  last ? LogitsRows::Last : LogitsRows::None, last ? last_logits->data() : nullptr);
  }
}

SamplingParams sampling_defaults(const ModelConfig& config) {
  SamplingParams p;
  const auto& g = config.generation();
  auto num = [&](const char* key, double fallback) {
    auto it = g.find(key);
    return it != g.end() && it->is_number() ? it->get<double>() : fallback;
  };
  const bool do_sample =
      g.contains("do_sample") && g["do_sample"].is_boolean() && g["do_sample"].get<bool>();
  p.temperature = do_sample ? float(num("temperature", 1.0)) : 0.0f;
  // Converted to int: out of range it would be undefined, not merely a bad setting.
  const double top_k = num("top_k", 50);
  if (do_sample && !(top_k >= 0.0 && top_k <= double(INT32_MAX)))
    fail("{}: field 'top_k' is {}, expected an integer in [0, {}]", config.generation_source(),
         top_k, INT32_MAX);
  p.top_k = do_sample ? int(top_k) : 0;
  p.top_p = float(num("top_p", 1.0));
  p.min_p = float(num("min_p", 0.0));
  p.repetition_penalty = float(num("repetition_penalty", 1.0));
  return p;
}

}  // namespace hearth
