// A paged KV cache mirrored on two backends, for the CUDA op tests (cuda_ops_test.cpp,
// cuda_rows_test.cpp, cuda_fused_test.cpp): KvCache's layout (kv/kv_cache.h) without KvCache.
// Blocks of KvCache::kBlockPositions positions hold, for each of `layers` layers in order, the
// block's key rows then its value rows; a row is `row` elements (n_head_kv · head_dim) in the
// backend's activation dtype (the GPU's bf16, the CPU's f32). Each side has its own blocks
// (allocated through its backend) and its own host table of block pointers; both hold the same
// random bf16-representable values. All layers share one table, as a KvCache group's do.
// Needs no CUDA header: a CPU backend may stand in for the GPU.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "kv/kv_cache.h"

namespace hearth::test {

class PagedKv {
 public:
  static constexpr int64_t kBlock = KvCache::kBlockPositions;

  // An empty cache: no blocks yet (first = end = 0).
  PagedKv(Backend& gpu, Backend& cpu, int64_t row, int layers = 1)
      : side_{Side(&gpu), Side(&cpu)}, row_(row), layers_(layers) {}
  // Blocks for positions [0, end) with random contents, positions below `first` dropped.
  PagedKv(Backend& gpu, Backend& cpu, int64_t row, int layers, int64_t end, int64_t first,
          uint32_t& seed)
      : PagedKv(gpu, cpu, row, layers) {
    extend(end, seed);
    drop_below(first);
  }
  PagedKv(PagedKv&&) = default;
  PagedKv& operator=(PagedKv&&) = default;
  PagedKv(const PagedKv&) = delete;
  PagedKv& operator=(const PagedKv&) = delete;

  // Views end at `end` from now on; the table gains the blocks positions [0, end) need, filled
  // with random values (one seed per block, seed++), on both sides alike. Blocks already there
  // keep their addresses and contents (the table itself may move, as KvCache's does).
  void extend(int64_t end, uint32_t& seed) {
    end_ = std::max(end_, end);
    const int64_t n = (end_ + kBlock - 1) / kBlock;
    while (int64_t(side_[0].table.size()) < n) {
      std::vector<float> values(size_t(block_rows() * row_));
      std::mt19937 rng(seed++);
      std::normal_distribution<float> dist(0.0f, 1.0f);
      for (float& x : values) x = bf16_to_f32(f32_to_bf16(dist(rng)));
      for (Side& s : side_) {
        s.memory.push_back(s.backend->alloc(block_bytes(s)));
        s.table.push_back(static_cast<std::byte*>(s.memory.back().data()));
        write(s, s.table.back(), values);
      }
    }
  }
  // Positions below `first` are dropped: the blocks wholly below first's block are freed and
  // their table entries null on both sides (first itself need not start a block).
  void drop_below(int64_t first) {
    first_ = std::max(first_, first);
    for (Side& s : side_)
      for (int64_t i = 0; i < first_ / kBlock && i < int64_t(s.table.size()); ++i) {
        s.memory[size_t(i)] = DeviceBuffer();
        s.table[size_t(i)] = nullptr;
      }
  }

  int64_t first() const { return first_; }
  int64_t end() const { return end_; }
  int layers() const { return layers_; }
  // Layer `layer`'s view on the GPU side and on the CPU side.
  KvView gv(int layer) const { return view(side_[0], layer); }
  KvView cv(int layer) const { return view(side_[1], layer); }

  // Every live block agrees between the GPU and the CPU: each layer's keys and values at all of
  // the block's positions, the unwritten ones too (so a row written in the wrong place shows).
  void expect_close(double tol, const std::string& what) const {
    for (int64_t i = 0; i < int64_t(side_[0].table.size()); ++i) {
      if (!side_[0].table[size_t(i)]) continue;
      const std::vector<float> g = read(side_[0], i), c = read(side_[1], i);
      double ss = 0, worst = 0;
      for (float w : c) ss += double(w) * w;
      const double rms = std::max(std::sqrt(ss / double(c.size())), 1e-6);
      int64_t at = 0;
      for (size_t j = 0; j < c.size(); ++j) {
        const double e = std::isnan(g[j]) ? INFINITY : std::fabs(double(g[j]) - double(c[j]));
        const double r = e / (std::fabs(double(c[j])) + rms);
        if (r > worst) worst = r, at = int64_t(j);
      }
      // The worst element's place: layer, keys or values, position.
      const int64_t block_row = at / row_, layer = block_row / (2 * kBlock);
      EXPECT_LT(worst, tol) << what << ": block " << i << " (positions " << i * kBlock << ".."
                            << (i + 1) * kBlock - 1 << "), worst at layer " << layer
                            << (block_row % (2 * kBlock) < kBlock ? " key" : " value")
                            << " of position " << i * kBlock + block_row % kBlock;
    }
  }

 private:
  struct Side {
    explicit Side(Backend* backend_) : backend(backend_) {}
    Backend* backend;
    std::vector<DeviceBuffer> memory;  // per block; empty once freed
    std::vector<std::byte*> table;     // memory[i].data(), null once freed
  };

  int64_t block_rows() const { return 2 * int64_t(layers_) * kBlock; }
  size_t row_bytes(const Side& s) const {
    return size_t(row_) * dtype_size(s.backend->activation_dtype());
  }
  size_t block_bytes(const Side& s) const { return size_t(block_rows()) * row_bytes(s); }
  Tensor block_tensor(const Side& s, std::byte* block) const {
    return Tensor(block, s.backend->activation_dtype(), {block_rows(), row_}, s.backend->device());
  }
  void write(const Side& s, std::byte* block, const std::vector<float>& values) const {
    const DType dt = s.backend->activation_dtype();
    if (dt == DType::F32) {
      s.backend->copy_from_host(block_tensor(s, block), values.data());
      return;
    }
    std::vector<uint16_t> half(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      half[i] = dt == DType::BF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
    s.backend->copy_from_host(block_tensor(s, block), half.data());
  }
  std::vector<float> read(const Side& s, int64_t i) const {
    std::vector<float> values(size_t(block_rows() * row_));
    s.backend->to_host_f32(values.data(), block_tensor(s, s.table[size_t(i)]));
    return values;
  }
  KvView view(const Side& s, int layer) const {
    KvView kv;
    kv.first = first_;
    kv.end = end_;
    kv.blocks = s.table.data();
    kv.block_size = kBlock;
    kv.row_bytes = int64_t(row_bytes(s));
    kv.k_offset = 2 * int64_t(layer) * kBlock * kv.row_bytes;
    kv.v_offset = kv.k_offset + kBlock * kv.row_bytes;
    return kv;
  }

  Side side_[2];  // the GPU's, the CPU's
  int64_t row_;
  int layers_;
  int64_t first_ = 0, end_ = 0;
};

}  // namespace hearth::test
