// KvCache: one sequence's attention keys and values, per layer, in the backend's memory and
// activation dtype.
// Full-attention layers grow (doubling, 256-token minimum) and keep every position.
// Sliding-window layers are rings that keep only what a window can still see: capacity is at
// least window - 1 + the largest batch, so a batch never overwrites a key one of its own queries
// needs. Valid positions of every layer are [first, end); end is the same for all layers.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace hearth {

class KvCache {
 public:
  // windows[i] is layer i's sliding window (0 = full attention).
  KvCache(Backend& backend, std::vector<int> windows, int n_head_kv, int head_dim);

  int64_t n_past() const { return end_; }
  // Makes room for positions [end, end + n_tokens); views then include the batch's positions,
  // so its queries see its own keys. Call before storing a batch.
  void reserve_batch(int64_t n_tokens);
  // Marks the reserved batch as written (after every layer stored it).
  void commit_batch();
  // Drops positions >= n (rollback). Sliding layers cannot recover evicted positions, so a
  // rollback further back than a window is refused by returning false.
  bool truncate(int64_t n);
  KvView view(int layer) const;
  size_t bytes() const;
  // bytes() once n_more more positions are stored (the buffers' growth included).
  size_t bytes_after(int64_t n_more) const;

 private:
  struct Layer {
    DeviceBuffer k, v;
    int64_t capacity = 0;
    int64_t first = 0;
    int window = 0;
  };
  void grow(Layer& layer, int64_t capacity);
  // The capacity `layer` needs to hold a batch of n_tokens after the stored positions.
  int64_t capacity_for(const Layer& layer, int64_t n_tokens) const;

  Backend* backend_;
  std::vector<Layer> layers_;
  int64_t row_elems_;  // n_head_kv * head_dim
  size_t row_bytes_;
  int64_t end_ = 0;
  int64_t pending_ = 0;  // tokens of the batch being written
};

}  // namespace hearth
