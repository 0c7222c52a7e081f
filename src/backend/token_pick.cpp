#include "backend/token_pick.h"

#include <algorithm>
#include <cmath>

namespace hearth {

int32_t pick_token_host(std::span<const float> logits, const TokenPick& pick,
                        std::vector<std::pair<float, int32_t>>& candidates) {
  if (pick.temperature <= 0.0f)
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Candidates sorted by logit, descending; then the truncations, each keeping at least one.
  candidates.clear();
  const float inv_t = 1.0f / pick.temperature;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] > -INFINITY) candidates.push_back({logits[i] * inv_t, int32_t(i)});
  if (candidates.empty()) return 0;
  size_t keep = candidates.size();
  if (pick.top_k > 0) keep = std::min(keep, size_t(pick.top_k));
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (keep < candidates.size()) {
    std::partial_sort(candidates.begin(), candidates.begin() + long(keep), candidates.end(),
                      by_logit);
    candidates.resize(keep);
  } else {
    std::sort(candidates.begin(), candidates.end(), by_logit);
  }
  // Softmax over the survivors.
  const float max_logit = candidates[0].first;
  double sum = 0.0;
  for (auto& c : candidates) {
    c.first = std::exp(c.first - max_logit);
    sum += c.first;
  }
  for (auto& c : candidates) c.first = float(c.first / sum);
  if (pick.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t n = 0;
    while (n < candidates.size()) {
      cumulative += candidates[n].first;
      ++n;
      if (cumulative >= pick.top_p) break;
    }
    candidates.resize(std::max<size_t>(n, 1));
  }
  if (pick.min_p > 0.0f) {
    const float threshold = candidates[0].first * pick.min_p;
    size_t n = 1;
    while (n < candidates.size() && candidates[n].first >= threshold) ++n;
    candidates.resize(n);
  }
  double total = 0.0;
  for (auto& c : candidates) total += c.first;
  double r = pick.u * total;
  for (auto& c : candidates) {
    r -= c.first;
    if (r < 0.0) return c.second;
  }
  return candidates.back().second;
}

}  // namespace hearth
