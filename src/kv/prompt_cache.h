// PromptCache: finished sequences' states kept in RAM, keyed by the tokens they hold, so a new
// request whose prompt shares a prefix with an earlier one skips prefilling that prefix.
// Invariants: an entry's state holds exactly its `tokens` (n_past() == tokens.size()); the sum
// of entries' bytes() stays <= the cap (least recently used entries are dropped first). An
// entry's bytes() changes while it shares blocks with others (a shared block counts for its
// share), so the sum is taken again when an entry comes in and by refresh_bytes(). A state that can
// be shared (SequenceState::share, paged KV) stays cached when a request reuses it, so concurrent
// requests with a common prefix share its memory; any other state is owned by one place at a time
// (taken out by acquire(), handed back by release()). Recurrent (hybrid) states can only go back to
// positions where keep_checkpoint() was called, so entries remember those positions and acquire()
// falls back to the largest one that fits. Thread-safe (one mutex); the engine's worker is the only
// caller today.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "models/model.h"

namespace hearth {

struct PromptCacheStats {
  uint64_t lookups = 0;
  uint64_t hits = 0;  // lookups that reused at least one token
  uint64_t reused_tokens = 0;
  size_t bytes = 0;
  size_t entries = 0;
};

class PromptCache {
 public:
  explicit PromptCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  struct Acquired {
    std::unique_ptr<SequenceState> state;  // null when nothing matched (make a new one)
    int64_t n_reused = 0;                  // == state->n_past()
    std::vector<int64_t> checkpoints;      // checkpoint positions still valid (<= n_reused)
  };
  // Takes out (or shares) the entry that serves the most of `prompt`: its common prefix, or for
  // a recurrent state the last checkpoint within it, at most `max_reuse` tokens (callers pass
  // prompt.size() - 1: the last prompt token must be run to get logits). Entries that match
  // nothing stay cached.
  Acquired acquire(std::span<const int32_t> prompt, int64_t max_reuse);
  // The tokens acquire() would reuse for `prompt` now (nothing is taken or counted).
  int64_t reusable(std::span<const int32_t> prompt, int64_t max_reuse);
  // Hands a state back; `tokens` are the tokens it holds (n_past() of them). Evicts LRU entries
  // over the cap; a state larger than the whole cap is dropped.
  void release(std::vector<int32_t> tokens, std::unique_ptr<SequenceState> state,
               std::vector<int64_t> checkpoints);
  void clear();
  // What the entries hold now (each state's bytes(), shares as they are now).
  size_t refresh_bytes();
  // Drops the least recently used entry; false when there is none. The engine calls it to make
  // room for running requests, which share one memory pool with the cache.
  bool evict_oldest();
  PromptCacheStats stats() const;
  size_t max_bytes() const { return max_bytes_; }
  // Lowers (or raises) the cap, evicting entries over it.
  void set_max_bytes(size_t max_bytes);

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::unique_ptr<SequenceState> state;
    std::vector<int64_t> checkpoints;  // ascending
    size_t bytes = 0;
  };
  void evict_locked();
  void refresh_bytes_locked();
  // The entry serving `prompt` best and how many of its tokens it serves (end(), 0: none).
  std::pair<std::list<Entry>::iterator, int64_t> best_locked(std::span<const int32_t> prompt,
                                                             int64_t max_reuse);

  size_t max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // front = most recently used
  size_t bytes_ = 0;
  PromptCacheStats stats_;
};

}  // namespace hearth
