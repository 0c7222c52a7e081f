#include "server/responses_store.h"

namespace hearth::server {

void ResponseStore::set_limits(size_t max_count, size_t max_bytes) {
  std::lock_guard lock(mu_);
  max_count_ = max_count;
  max_bytes_ = max_bytes;
  evict_locked();
}

void ResponseStore::evict_locked() {
  while (!lru_.empty() && (lru_.size() > max_count_ || bytes_ > max_bytes_)) {
    bytes_ -= lru_.back().second->bytes();
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

bool ResponseStore::put(const std::string& id, std::shared_ptr<const StoredResponse> entry) {
  std::lock_guard lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->second->bytes();
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (max_count_ == 0 || entry->bytes() > max_bytes_) return false;
  bytes_ += entry->bytes();
  lru_.emplace_front(id, std::move(entry));
  index_[id] = lru_.begin();
  evict_locked();
  return true;
}

std::shared_ptr<const StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators stay valid
  return it->second->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->second->bytes();
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return lru_.size();
}

size_t ResponseStore::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

}  // namespace hearth::server
