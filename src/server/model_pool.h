// The models one server offers, and which of them are loaded (as Ollama and llama-swap do):
// every model given is listed; a request naming one loads it on demand; past `max_loaded`
// models, or past `max_bytes` of checkpoints, the least recently used idle model is unloaded
// first (a model with running requests waits for them to end), so that its memory is free
// before the next load takes it. Loads run outside the pool's lock: requests to
// loaded models go on while another model loads, and requests for the model being loaded wait
// for that one load. A failed load fails every request waiting for it and leaves the model
// unloaded, to be tried again by the next request.
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::server {

struct ModelEntry {
  std::string id;      // what clients name: "org/name" for a Hugging Face cache entry, else the dir
  std::string dir;     // the checkpoint directory
  uint64_t bytes = 0;  // its weights' size on disk: what loading it will take, roughly
  int64_t context = 0;  // its config's max_position_embeddings (0: unknown)
};

template <class Loaded>
class ModelPool;

// A loaded model, held by a request while it runs: the model is not unloaded under it.
template <class Loaded>
class ModelLease {
 public:
  ModelLease() = default;
  ModelLease(ModelLease&& other) noexcept { *this = std::move(other); }
  ModelLease& operator=(ModelLease&& other) noexcept {
    release();
    pool_ = other.pool_;
    slot_ = other.slot_;
    model_ = std::move(other.model_);
    other.pool_ = nullptr;
    return *this;
  }
  ModelLease(const ModelLease&) = delete;
  ModelLease& operator=(const ModelLease&) = delete;
  ~ModelLease() { release(); }
  Loaded& operator*() const { return *model_; }
  Loaded* operator->() const { return model_.get(); }
  explicit operator bool() const { return model_ != nullptr; }

 private:
  friend class ModelPool<Loaded>;
  void release();
  ModelPool<Loaded>* pool_ = nullptr;
  size_t slot_ = 0;
  std::shared_ptr<Loaded> model_;
};

template <class Loaded>
class ModelPool {
 public:
  using Loader = std::function<std::shared_ptr<Loaded>(const ModelEntry&)>;
  // `max_loaded` >= 1; `max_bytes` 0: no cap. `load` builds a model (throws what is wrong); an
  // unloaded model is destroyed on the thread of the request that needed its room.
  ModelPool(std::vector<ModelEntry> entries, size_t max_loaded, uint64_t max_bytes, Loader load)
      : entries_(std::move(entries)),
        slots_(entries_.size()),
        max_loaded_(max_loaded),
        max_bytes_(max_bytes),
        load_(std::move(load)) {}

  const std::vector<ModelEntry>& entries() const { return entries_; }
  // The entry a request's model name means: its id, or the id with ":latest" (Ollama's default
  // tag) after it; nullptr when the pool has no such model.
  const ModelEntry* find(std::string_view name) const {
    if (name.ends_with(":latest")) name.remove_suffix(7);
    for (const auto& e : entries_)
      if (e.id == name) return &e;
    return nullptr;
  }
  // The loaded model of `entry` (one of entries()), loading it first when needed.
  ModelLease<Loaded> acquire(const ModelEntry& entry);
  // Ids of the loaded models, most recently used first.
  std::vector<std::string> loaded() const;
  // Calls fn on each loaded model with the pool's lock held (fn must be quick).
  void for_each_loaded(const std::function<void(const Loaded&)>& fn) const {
    std::lock_guard lock(mu_);
    for (const Slot& s : slots_)
      if (s.state == State::Ready) fn(*s.model);
  }

 private:
  friend class ModelLease<Loaded>;
  enum class State { Unloaded, Loading, Ready, Unloading };
  struct Slot {
    State state = State::Unloaded;
    std::shared_ptr<Loaded> model;
    int64_t leases = 0;
    uint64_t last_used = 0;
    uint64_t loads = 0;         // load attempts started
    std::exception_ptr failed;  // why the last attempt failed
  };
  size_t index_of(const ModelEntry& entry) const { return size_t(&entry - entries_.data()); }
  size_t loaded_count() const;
  // Whether `entry` fits beside the models loaded now.
  bool fits(const ModelEntry& entry) const;
  // The least recently used loaded slot without leases, or slots_.size().
  size_t idle_victim() const;
  void release(size_t slot);

  std::vector<ModelEntry> entries_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  size_t max_loaded_;
  uint64_t max_bytes_;
  Loader load_;
  uint64_t clock_ = 0;
};

template <class Loaded>
void ModelLease<Loaded>::release() {
  if (!pool_) return;
  model_.reset();
  pool_->release(slot_);
  pool_ = nullptr;
}

template <class Loaded>
size_t ModelPool<Loaded>::loaded_count() const {
  size_t n = 0;
  for (const Slot& s : slots_) n += s.state != State::Unloaded;
  return n;
}

template <class Loaded>
bool ModelPool<Loaded>::fits(const ModelEntry& entry) const {
  const size_t n = loaded_count();
  if (n == 0) return true;  // alone, any model may try
  if (n >= max_loaded_) return false;
  if (max_bytes_ == 0) return true;
  uint64_t bytes = entry.bytes;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].state != State::Unloaded) bytes += entries_[i].bytes;
  return bytes <= max_bytes_;
}

template <class Loaded>
size_t ModelPool<Loaded>::idle_victim() const {
  size_t best = slots_.size();
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.state == State::Ready && s.leases == 0 &&
        (best == slots_.size() || s.last_used < slots_[best].last_used))
      best = i;
  }
  return best;
}

template <class Loaded>
void ModelPool<Loaded>::release(size_t slot) {
  {
    std::lock_guard lock(mu_);
    --slots_[slot].leases;
  }
  cv_.notify_all();
}

template <class Loaded>
ModelLease<Loaded> ModelPool<Loaded>::acquire(const ModelEntry& entry) {
  const size_t i = index_of(entry);
  std::unique_lock lock(mu_);
  uint64_t waited_on = 0;  // the load attempt this request waits for, if any
  for (;;) {
    Slot& slot = slots_[i];
    if (slot.state == State::Unloaded && waited_on != 0 && slot.loads == waited_on && slot.failed)
      std::rethrow_exception(slot.failed);  // the load it waited for failed: so does it
    if (slot.state == State::Loading) waited_on = slot.loads;
    if (slot.state == State::Ready) {
      ++slot.leases;
      slot.last_used = ++clock_;
      ModelLease<Loaded> lease;
      lease.pool_ = this;
      lease.slot_ = i;
      lease.model_ = slot.model;
      return lease;
    }
    if (slot.state == State::Unloaded) {
      if (fits(entry)) break;
      // Make room: the least recently used idle model goes (destroyed outside the lock).
      const size_t victim = idle_victim();
      if (victim < slots_.size()) {
        std::shared_ptr<Loaded> gone = std::move(slots_[victim].model);
        slots_[victim].state = State::Unloading;
        lock.unlock();
        gone.reset();
        lock.lock();
        slots_[victim].state = State::Unloaded;
        cv_.notify_all();
        continue;
      }
    }
    // Loading or unloading elsewhere, or every loaded model busy: wait for a change.
    cv_.wait(lock);
  }
  slots_[i].state = State::Loading;
  ++slots_[i].loads;
  slots_[i].failed = nullptr;
  lock.unlock();
  std::shared_ptr<Loaded> model;
  try {
    model = load_(entry);
  } catch (...) {
    lock.lock();
    slots_[i].state = State::Unloaded;
    slots_[i].failed = std::current_exception();
    cv_.notify_all();
    throw;
  }
  lock.lock();
  Slot& slot = slots_[i];
  slot.model = std::move(model);
  slot.state = State::Ready;
  ++slot.leases;
  slot.last_used = ++clock_;
  cv_.notify_all();
  ModelLease<Loaded> lease;
  lease.pool_ = this;
  lease.slot_ = i;
  lease.model_ = slot.model;
  return lease;
}

template <class Loaded>
std::vector<std::string> ModelPool<Loaded>::loaded() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<uint64_t, std::string>> order;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].state == State::Ready) order.emplace_back(slots_[i].last_used, entries_[i].id);
  std::sort(order.rbegin(), order.rend());
  std::vector<std::string> ids;
  for (auto& [used, id] : order) ids.push_back(std::move(id));
  return ids;
}

}  // namespace hearth::server
