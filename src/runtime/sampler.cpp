#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend/token_pick.h"
#include "core/error.h"

namespace hearth {

void SamplingParams::validate(int64_t n_vocab) const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    fail("temperature must be a finite number >= 0, got {}", temperature);
  if (top_k < 0) fail("top_k must be >= 0, got {}", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    fail("repetition_penalty must be > 0, got {}", repetition_penalty);
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 2.0f)
    fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 2.0f)
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (penalty_last_n < 0) fail("penalty_last_n must be >= 0, got {}", penalty_last_n);
  for (auto [id, bias] : logit_bias) {
    if (id < 0 || id >= n_vocab)
      fail("logit_bias token id {} is out of range [0, {})", id, n_vocab);
    if (std::isnan(bias)) fail("logit_bias for token {} is NaN", id);
  }
}

SamplingParams SamplingOverrides::apply(SamplingParams p) const {
  if (temperature) p.temperature = *temperature;
  if (top_p) p.top_p = *top_p;
  if (top_k) p.top_k = *top_k;
  if (min_p) p.min_p = *min_p;
  if (repetition_penalty) p.repetition_penalty = *repetition_penalty;
  if (presence_penalty) p.presence_penalty = *presence_penalty;
  if (frequency_penalty) p.frequency_penalty = *frequency_penalty;
  if (penalty_last_n) p.penalty_last_n = *penalty_last_n;
  if (seed) p.seed = *seed;
  for (auto [id, b] : logit_bias) p.logit_bias[id] = b;
  return p;
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      rng_(params.seed ? *params.seed : std::random_device{}()) {
  params_.validate(n_vocab);
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  const bool any = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                   params_.frequency_penalty != 0.0f;
  if (!any || history.empty()) return;
  if (params_.penalty_last_n > 0 && history.size() > size_t(params_.penalty_last_n))
    history = history.last(size_t(params_.penalty_last_n));
  // O(history), not O(vocabulary): counts_ is all zeros between calls, and each distinct token
  // is penalised once, then its count reset (a 150K vocabulary scanned per token costs more
  // than a small model's decode step).
  if (counts_.size() != size_t(n_vocab_)) counts_.assign(size_t(n_vocab_), 0);
  for (int32_t t : history)
    if (t >= 0 && t < n_vocab_) ++counts_[size_t(t)];
  for (int32_t t : history) {
    if (t < 0 || t >= n_vocab_) continue;
    const int32_t c = std::exchange(counts_[size_t(t)], 0);
    if (c == 0) continue;  // already penalised
    float& l = logits[size_t(t)];
    if (params_.repetition_penalty != 1.0f)
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    l -= params_.presence_penalty + params_.frequency_penalty * float(c);
  }
}

bool Sampler::backend_can_pick() const {
  return params_.repetition_penalty == 1.0f && params_.presence_penalty == 0.0f &&
         params_.frequency_penalty == 0.0f && params_.logit_bias.empty();
}

TokenPick Sampler::next_pick() {
  TokenPick p;
  p.temperature = params_.temperature;
  p.top_k = params_.top_k;
  p.top_p = params_.top_p;
  p.min_p = params_.min_p;
  if (p.temperature > 0.0f) p.u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  return p;
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  apply_penalties(logits, history);
  for (auto [id, bias] : params_.logit_bias) logits[size_t(id)] += bias;
  return pick_token_host(logits, next_pick(), candidates_);
}

}  // namespace hearth
