// The stored responses of /v1/responses (store: true): what GET /v1/responses/{id} returns, what
// GET /v1/responses/{id}/input_items lists and what a later request's previous_response_id
// continues. In memory only, bounded by a count and by bytes, least recently used first out (a
// retrieval, a listing or a continuation counts as a use). Entries are kept as JSON text, so the
// byte bound is the memory they hold (parsed JSON trees would be several times larger), and are
// shared read-only: a reader keeps its copy alive while the store evicts or deletes it.
#pragma once
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace hearth::server {

struct StoredResponse {
  std::string conversation;  // JSON array: every input item of the conversation up to this one
  std::string response;      // JSON object: the response as it was returned
  // This response's own input items (what GET /v1/responses/{id}/input_items lists): the items
  // of `conversation` from `input_begin` on, or, when truncation "auto" cut into them (so they
  // are not all there), `input`: their JSON array. Empty `input` means the first: the common
  // case stores them once.
  size_t input_begin = 0;
  std::string input;
  size_t bytes() const { return conversation.size() + response.size() + input.size() + 128; }
};

class ResponseStore {
 public:
  ResponseStore(size_t max_count = 1000, size_t max_bytes = size_t{256} << 20)
      : max_count_(max_count), max_bytes_(max_bytes) {}
  // Applies new bounds, evicting what no longer fits.
  void set_limits(size_t max_count, size_t max_bytes);
  // Stores (or replaces) `id`, evicting the least recently used until both bounds hold. False
  // when the entry alone is over the byte bound (or the store holds nothing): it is not kept.
  bool put(const std::string& id, std::shared_ptr<const StoredResponse> entry);
  // Null when unknown (never stored, evicted or deleted). Marks the entry as just used.
  std::shared_ptr<const StoredResponse> get(const std::string& id);
  bool erase(const std::string& id);
  size_t size() const;
  size_t bytes() const;

 private:
  void evict_locked();
  using Entry = std::pair<std::string, std::shared_ptr<const StoredResponse>>;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
  size_t max_count_;
  size_t max_bytes_;
};

}  // namespace hearth::server
