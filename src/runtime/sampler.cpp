#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

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
    if (id < 0 || id >= n_vocab) fail("logit_bias token id {} is out of range [0, {})", id, n_vocab);
    if (std::isnan(bias)) fail("logit_bias for token {} is NaN", id);
  }
}

Sampler::Sampler(const SamplingParams& params, int64_t n_vocab)
    : params_(params), n_vocab_(n_vocab), rng_(params.seed ? *params.seed : std::random_device{}()) {
  params_.validate(n_vocab);
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> history) {
  const bool any = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                   params_.frequency_penalty != 0.0f;
  if (!any || history.empty()) return;
  if (params_.penalty_last_n > 0 && history.size() > size_t(params_.penalty_last_n))
    history = history.last(size_t(params_.penalty_last_n));
  counts_.assign(size_t(n_vocab_), 0);
  for (int32_t t : history)
    if (t >= 0 && t < n_vocab_) ++counts_[size_t(t)];
  for (int64_t t = 0; t < n_vocab_; ++t) {
    const int32_t c = counts_[size_t(t)];
    if (c == 0) continue;
    float& l = logits[size_t(t)];
    if (params_.repetition_penalty != 1.0f)
      l = l > 0 ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    l -= params_.presence_penalty + params_.frequency_penalty * float(c);
  }
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  apply_penalties(logits, history);
  for (auto [id, bias] : params_.logit_bias) logits[size_t(id)] += bias;

  if (params_.temperature <= 0.0f) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates sorted by logit, descending; then the truncations, each keeping at least one.
  candidates_.clear();
  const float inv_t = 1.0f / params_.temperature;
  for (int64_t i = 0; i < n_vocab_; ++i)
    if (logits[size_t(i)] > -INFINITY) candidates_.push_back({logits[size_t(i)] * inv_t, int32_t(i)});
  if (candidates_.empty()) return 0;
  size_t keep = candidates_.size();
  if (params_.top_k > 0) keep = std::min(keep, size_t(params_.top_k));
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (keep < candidates_.size()) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), by_logit);
    candidates_.resize(keep);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  // Softmax over the survivors.
  const float max_logit = candidates_[0].first;
  double sum = 0.0;
  for (auto& c : candidates_) {
    c.first = std::exp(c.first - max_logit);
    sum += c.first;
  }
  for (auto& c : candidates_) c.first = float(c.first / sum);
  if (params_.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t n = 0;
    while (n < candidates_.size()) {
      cumulative += candidates_[n].first;
      ++n;
      if (cumulative >= params_.top_p) break;
    }
    candidates_.resize(std::max<size_t>(n, 1));
  }
  if (params_.min_p > 0.0f) {
    const float threshold = candidates_[0].first * params_.min_p;
    size_t n = 1;
    while (n < candidates_.size() && candidates_[n].first >= threshold) ++n;
    candidates_.resize(n);
  }
  double total = 0.0;
  for (auto& c : candidates_) total += c.first;
  std::uniform_real_distribution<double> uniform(0.0, total);
  double r = uniform(rng_);
  for (auto& c : candidates_) {
    r -= c.first;
    if (r < 0.0) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace hearth
