#include "kv/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace hearth {

namespace {
constexpr int64_t B = KvCache::kBlockPositions;
int64_t blocks_for(int64_t positions) { return (positions + B - 1) / B; }
std::atomic<int64_t> g_blocks_alive{0};
}  // namespace

KvCache::Block::Block(DeviceBuffer memory_, int64_t filled_)
    : memory(std::move(memory_)), filled(filled_) {
  g_blocks_alive.fetch_add(1, std::memory_order_relaxed);
}
KvCache::Block::~Block() { g_blocks_alive.fetch_sub(1, std::memory_order_relaxed); }
int64_t KvCache::blocks_alive() { return g_blocks_alive.load(std::memory_order_relaxed); }

KvCache::KvCache(Backend& backend, std::vector<int> windows, int n_head_kv, int head_dim)
    : backend_(&backend),
      row_elems_(int64_t(n_head_kv) * head_dim),
      row_bytes_(size_t(row_elems_) * dtype_size(backend.activation_dtype())) {
  for (int window : windows) {
    auto g = std::find_if(groups_.begin(), groups_.end(),
                          [&](const Group& x) { return x.window == window; });
    if (g == groups_.end()) {
      groups_.push_back({});
      g = groups_.end() - 1;
      g->window = window;
    }
    places_.push_back({int(g - groups_.begin()), g->n_layers++});
  }
}

int64_t KvCache::positions_held(int64_t n) { return blocks_for(n) * B; }

int64_t KvCache::keep_from(int window) const {
  return window > 0 ? std::max<int64_t>(0, end_ - (window - 1) - max_batch_) : 0;
}

size_t KvCache::block_bytes(const Group& g) const {
  return size_t(2 * g.n_layers) * size_t(B) * row_bytes_;
}

bool KvCache::writes_shared_rows(const std::shared_ptr<Block>& block, int64_t index) const {
  const int64_t start = index * B;
  return std::max(end_, start) - start < block->filled && block.use_count() > 1;
}

void KvCache::claim_rows(Group& g, int64_t n_tokens) {
  const size_t needed = size_t(blocks_for(end_ + n_tokens));
  while (g.blocks.size() < needed) {
    g.blocks.push_back(std::make_shared<Block>(backend_->alloc(block_bytes(g)), 0));
    g.table.push_back(static_cast<std::byte*>(g.blocks.back()->memory.data()));
  }
  if (n_tokens <= 0) return;  // nothing is written
  for (int64_t i = end_ / B; i < int64_t(needed); ++i) {
    std::shared_ptr<Block>& block = g.blocks[size_t(i)];
    const int64_t start = i * B;
    const int64_t from = std::max(end_, start) - start, to = std::min(end_ + n_tokens - start, B);
    if (writes_shared_rows(block, i)) {
      // Another holder may read these rows: write into a copy of the block.
      auto copy = std::make_shared<Block>(backend_->alloc(block_bytes(g)), from);
      const int64_t rows = int64_t(block_bytes(g) / row_bytes_);
      const DType dtype = backend_->activation_dtype();
      backend_->copy(
          Tensor(copy->memory.data(), dtype, {rows, row_elems_}, copy->memory.device()),
          Tensor(block->memory.data(), dtype, {rows, row_elems_}, block->memory.device()));
      block = std::move(copy);
      g.table[size_t(i)] = static_cast<std::byte*>(block->memory.data());
    }
    block->filled = std::max(block->filled, to);
  }
}

void KvCache::reserve_batch(int64_t n_tokens) {
  for (auto& g : groups_) claim_rows(g, n_tokens);
  pending_ = n_tokens;
}

void KvCache::commit_batch() {
  end_ += pending_;
  max_batch_ = std::max(max_batch_, pending_);
  pending_ = 0;
  for (auto& g : groups_) {
    // Blocks wholly before what the window must keep are freed.
    const int64_t keep = keep_from(g.window);
    for (int64_t i = g.first / B; i < keep / B; ++i) {
      g.blocks[size_t(i)].reset();
      g.table[size_t(i)] = nullptr;
    }
    g.first = std::max(g.first, keep / B * B);
  }
}

bool KvCache::truncate(int64_t n) {
  if (n >= end_) return true;
  n = std::max<int64_t>(n, 0);
  // A query at n sees positions from n - window + 1 on: they must still be there.
  auto reaches = [n](int window, int64_t first) {
    return window <= 0 || std::max<int64_t>(0, n - window + 1) >= first;
  };
  for (const auto& g : groups_)
    if (!reaches(g.window, g.first)) return false;
  end_ = n;
  pending_ = 0;
  return true;
}

KvView KvCache::view(int layer_index) const {
  KvView kv;
  kv.end = end_ + pending_;
  const Place place = places_[size_t(layer_index)];
  const Group& g = groups_[size_t(place.group)];
  kv.first = g.first;
  kv.blocks = g.table.data();
  kv.block_size = B;
  kv.row_bytes = int64_t(row_bytes_);
  kv.k_offset = int64_t(2 * place.index) * B * kv.row_bytes;
  kv.v_offset = kv.k_offset + B * kv.row_bytes;
  return kv;
}

KvCache KvCache::share() const {
  KvCache copy(*backend_, {}, 1, 1);
  copy.groups_ = groups_;  // the same blocks, one more holder each
  copy.places_ = places_;
  copy.row_elems_ = row_elems_;
  copy.row_bytes_ = row_bytes_;
  copy.end_ = end_;
  copy.max_batch_ = max_batch_;
  return copy;
}

size_t KvCache::bytes_after(int64_t n_more) const {
  size_t total = 0;
  for (const auto& g : groups_) {
    // Blocks to add, and shared ones the batch writes into that are copied first.
    int64_t added = std::max<int64_t>(0, blocks_for(end_ + n_more) - int64_t(g.blocks.size()));
    for (int64_t i = end_ / B;
         n_more > 0 && i < std::min<int64_t>(blocks_for(end_ + n_more), int64_t(g.blocks.size()));
         ++i) {
      const auto& block = g.blocks[size_t(i)];
      if (writes_shared_rows(block, i)) ++added;
    }
    total += size_t(added) * block_bytes(g);
  }
  return bytes() + total;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const auto& g : groups_)
    for (const auto& block : g.blocks)
      if (block) total += block_bytes(g) / size_t(block.use_count());
  return total;
}

}  // namespace hearth
