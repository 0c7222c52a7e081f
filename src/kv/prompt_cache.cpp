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

std::pair<std::list<PromptCache::Entry>::iterator, int64_t> PromptCache::best_locked(
    std::span<const int32_t> prompt, int64_t max_reuse) {
  // How far an entry's state can serve the prompt: the common prefix, or for a recurrent state
  // the last checkpoint within it (the state itself where the prefix covers all of it).
  auto reach = [&](const Entry& e) {
    const int64_t common = std::min(common_prefix(e.tokens, prompt), max_reuse);
    if (!e.state->needs_checkpoints() || common == int64_t(e.tokens.size())) return common;
    int64_t at = 0;
    for (int64_t c : e.checkpoints)
      if (c <= common) at = std::max(at, c);
    return at;
  };
  auto best = entries_.end();
  int64_t target = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (const int64_t n = reach(*it); n > target) target = n, best = it;
  return {best, target};
}

int64_t PromptCache::reusable(std::span<const int32_t> prompt, int64_t max_reuse) {
  std::lock_guard lock(mu_);
  return best_locked(prompt, max_reuse).second;
}

PromptCache::Acquired PromptCache::acquire(std::span<const int32_t> prompt, int64_t max_reuse) {
  std::lock_guard lock(mu_);
  ++stats_.lookups;
  Acquired out;
  const auto [best, target] = best_locked(prompt, max_reuse);
  if (best == entries_.end()) return out;
  // A state that can be shared stays cached for the next request: this one gets a copy that
  // holds the same memory until it writes. Any other state is taken out.
  std::unique_ptr<SequenceState> state = best->state->share();
  std::vector<int64_t> checkpoints = best->checkpoints;
  if (state) {
    entries_.splice(entries_.begin(), entries_, best);
  } else {
    state = std::move(best->state);
    bytes_ -= best->bytes;
    entries_.erase(best);
  }
  // A sliding window may no longer reach that far: then nothing is reused (a state taken out is
  // dropped).
  if (!state->truncate(target)) return out;
  ++stats_.hits;
  stats_.reused_tokens += uint64_t(target);
  out.n_reused = target;
  for (int64_t c : checkpoints)
    if (c <= target) out.checkpoints.push_back(c);
  out.state = std::move(state);
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
  entries_.push_front(std::move(e));
  refresh_bytes_locked();
  evict_locked();
}

void PromptCache::set_max_bytes(size_t max_bytes) {
  std::lock_guard lock(mu_);
  max_bytes_ = max_bytes;
  evict_locked();
}

void PromptCache::evict_locked() {
  while (bytes_ > max_bytes_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
}

void PromptCache::refresh_bytes_locked() {
  bytes_ = 0;
  for (Entry& e : entries_) bytes_ += e.bytes = e.state->bytes();
}

size_t PromptCache::refresh_bytes() {
  std::lock_guard lock(mu_);
  refresh_bytes_locked();
  return bytes_;
}

bool PromptCache::evict_oldest() {
  std::lock_guard lock(mu_);
  if (entries_.empty()) return false;
  bytes_ -= entries_.back().bytes;
  entries_.pop_back();
  return true;
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
