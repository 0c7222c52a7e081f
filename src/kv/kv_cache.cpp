#include "kv/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace hearth {

KvCache::KvCache(std::vector<int> windows, int n_head_kv, int head_dim)
    : row_floats_(int64_t(n_head_kv) * head_dim) {
  layers_.resize(windows.size());
  for (size_t i = 0; i < windows.size(); ++i) layers_[i].window = windows[i];
}

void KvCache::grow(Layer& layer, int64_t capacity) {
  const size_t bytes = size_t(capacity * row_floats_) * sizeof(float);
  Buffer k(bytes), v(bytes);
  // Re-lay the valid positions into their slots of the larger ring.
  for (int64_t p = layer.first; p < end_; ++p) {
    const int64_t from = p % layer.capacity, to = p % capacity;
    std::memcpy(static_cast<float*>(k.data()) + to * row_floats_,
                static_cast<float*>(layer.k.data()) + from * row_floats_, size_t(row_floats_) * 4);
    std::memcpy(static_cast<float*>(v.data()) + to * row_floats_,
                static_cast<float*>(layer.v.data()) + from * row_floats_, size_t(row_floats_) * 4);
  }
  layer.k = std::move(k);
  layer.v = std::move(v);
  layer.capacity = capacity;
}

void KvCache::reserve_batch(int64_t n_tokens) {
  for (auto& layer : layers_) {
    int64_t needed = end_ + n_tokens;
    if (layer.window > 0) needed = std::min<int64_t>(needed, layer.window - 1 + n_tokens);
    if (needed <= layer.capacity) continue;
    int64_t capacity = std::max<int64_t>(256, layer.capacity);
    while (capacity < needed) capacity *= 2;
    if (layer.window > 0) capacity = std::max<int64_t>(needed, std::min(capacity, end_ + n_tokens));
    grow(layer, capacity);
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
  kv.k = Tensor(layer.k.data(), DType::F32, {cap, row_floats_});
  kv.v = Tensor(layer.v.data(), DType::F32, {cap, row_floats_});
  kv.capacity = cap;
  kv.first = layer.first;
  kv.end = end_ + pending_;
  return kv;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const auto& layer : layers_) total += layer.k.size() + layer.v.size();
  return total;
}

}  // namespace hearth
