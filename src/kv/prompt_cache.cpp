// Longest-common-prefix reuse over an LRU list. The list is short (a few states per GB), so a
// linear scan per request costs microseconds next to one forward pass.
#include "kv/prompt_cache.h"

#include <algorithm>

namespace hearth {

namespace {
int64_t common_prefix(std::span<const int32_t> a, std::span<const int32_t> b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return int64_t(i);
}
}  // namespace

PromptCache::Acquired PromptCache::acquire(std::span<const int32_t> prompt, int64_t max_reuse) {
  std::lock_guard lock(mu_);
  ++stats_.lookups;
  Acquired out;
  auto best = entries_.end();
  int64_t best_len = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const int64_t len = std::min(common_prefix(it->tokens, prompt), max_reuse);
    if (len > best_len) best_len = len, best = it;
  }
  if (best == entries_.end()) return out;
  // A state that can be shared stays cached for the next request: this one gets a copy that
  // holds the same memory until it writes.
  if (std::unique_ptr<SequenceState> shared = best->state->share()) {
    if (!shared->truncate(best_len)) return out;  // a window that no longer reaches that far
    entries_.splice(entries_.begin(), entries_, best);
    ++stats_.hits;
    stats_.reused_tokens += uint64_t(best_len);
    out.n_reused = best_len;
    for (int64_t c : best->checkpoints)
      if (c <= best_len) out.checkpoints.push_back(c);
    out.state = std::move(shared);
    return out;
  }
  Entry entry = std::move(*best);
  entries_.erase(best);
  bytes_ -= entry.bytes;
  // Go back to the common prefix; recurrent states only reach their checkpoints.
  int64_t target = best_len;
  bool ok = entry.state->truncate(target);
  for (auto it = entry.checkpoints.rbegin(); !ok && it != entry.checkpoints.rend(); ++it) {
    if (*it > best_len) continue;
    target = *it;
    ok = target > 0 && entry.state->truncate(target);
  }
  if (!ok || target <= 0) return out;  // unusable for this prompt: the state is dropped
  ++stats_.hits;
  stats_.reused_tokens += uint64_t(target);
  out.n_reused = target;
  for (int64_t c : entry.checkpoints)
    if (c <= target) out.checkpoints.push_back(c);
  out.state = std::move(entry.state);
  return out;
}

void PromptCache::release(std::vector<int32_t> tokens, std::unique_ptr<SequenceState> state,
                          std::vector<int64_t> checkpoints) {
  if (!state || tokens.empty()) return;
  Entry e;
  e.bytes = state->bytes();
  if (e.bytes > max_bytes_) return;
  std::sort(checkpoints.begin(), checkpoints.end());
  checkpoints.erase(std::unique(checkpoints.begin(), checkpoints.end()), checkpoints.end());
  e.tokens = std::move(tokens);
  e.state = std::move(state);
  e.checkpoints = std::move(checkpoints);
  std::lock_guard lock(mu_);
  // An entry whose tokens are a prefix of the new one's is now redundant.
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->tokens.size() <= e.tokens.size() &&
        std::equal(it->tokens.begin(), it->tokens.end(), e.tokens.begin())) {
      bytes_ -= it->bytes;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  bytes_ += e.bytes;
  entries_.push_front(std::move(e));
  evict_locked();
}

void PromptCache::evict_locked() {
  while (bytes_ > max_bytes_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
}

void PromptCache::clear() {
  std::lock_guard lock(mu_);
  entries_.clear();
  bytes_ = 0;
}

PromptCacheStats PromptCache::stats() const {
  std::lock_guard lock(mu_);
  PromptCacheStats s = stats_;
  s.bytes = bytes_;
  s.entries = entries_.size();
  return s;
}

}  // namespace hearth
