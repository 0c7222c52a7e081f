#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace hearth {

KvCache::KvCache(Backend& backend, std::vector<int> windows, int n_head_kv, int head_dim)
    : backend_(&backend),
      row_elems_(int64_t(n_head_kv) * head_dim),
      row_bytes_(size_t(row_elems_) * dtype_size(backend.activation_dtype())) {
  layers_.resize(windows.size());
  for (size_t i = 0; i < windows.size(); ++i) layers_[i].window = windows[i];
}

void KvCache::grow(Layer& layer, int64_t capacity) {
  const DType dtype = backend_->activation_dtype();
  DeviceBuffer k = backend_->alloc(size_t(capacity) * row_bytes_);
  DeviceBuffer v = backend_->alloc(size_t(capacity) * row_bytes_);
  // Re-lay the valid positions into their slots of the larger ring, in contiguous runs.
  for (int64_t p = layer.first; p < end_;) {
    const int64_t from = p % layer.capacity, to = p % capacity;
    const int64_t run = std::min({end_ - p, layer.capacity - from, capacity - to});
    auto rows = [&](const DeviceBuffer& b, int64_t slot) {
      return Tensor(static_cast<char*>(b.data()) + size_t(slot) * row_bytes_, dtype,
                    {run, row_elems_}, b.device());
    };
    backend_->copy(rows(k, to), rows(layer.k, from));
    backend_->copy(rows(v, to), rows(layer.v, from));
    p += run;
  }
  layer.k = std::move(k);
  layer.v = std::move(v);
  layer.capacity = capacity;
}

int64_t KvCache::capacity_for(const Layer& layer, int64_t n_tokens) const {
  int64_t needed = end_ + n_tokens;
  if (layer.window > 0) needed = std::min<int64_t>(needed, layer.window - 1 + n_tokens);
  if (needed <= layer.capacity) return layer.capacity;
  int64_t capacity = std::max<int64_t>(256, layer.capacity);
  while (capacity < needed) capacity *= 2;
  if (layer.window > 0) capacity = std::max<int64_t>(needed, std::min(capacity, end_ + n_tokens));
  return capacity;
}

void KvCache::reserve_batch(int64_t n_tokens) {
  for (auto& layer : layers_) {
    const int64_t capacity = capacity_for(layer, n_tokens);
    if (capacity != layer.capacity) grow(layer, capacity);
  }
  pending_ = n_tokens;
}

void KvCache::commit_batch() {
  end_ += pending_;
  pending_ = 0;
  for (auto& layer : layers_) layer.first = std::max<int64_t>(layer.first, end_ - layer.capacity);
}

bool KvCache::truncate(int64_t n) {
  if (n >= end_) return true;
  for (auto& layer : layers_)
    if (n < layer.first) return false;
  end_ = std::max<int64_t>(n, 0);
  pending_ = 0;
  return true;
}

KvView KvCache::view(int layer_index) const {
  const Layer& layer = layers_[size_t(layer_index)];
  KvView kv;
  const int64_t cap = layer.capacity;
  kv.k = layer.k.view(backend_->activation_dtype(), {cap, row_elems_});
  kv.v = layer.v.view(backend_->activation_dtype(), {cap, row_elems_});
  kv.capacity = cap;
  kv.first = layer.first;
  kv.end = end_ + pending_;
  return kv;
}

size_t KvCache::bytes_after(int64_t n_more) const {
  size_t total = 0;
  for (const auto& layer : layers_) total += 2 * size_t(capacity_for(layer, n_more)) * row_bytes_;
  return total;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const auto& layer : layers_) total += layer.k.size() + layer.v.size();
  return total;
}

}  // namespace hearth
