// KvCache on the CPU backend (paged): what each layer's view reads back after batches of several
// sizes, the memory it holds (whole blocks, no doubling; a sliding window's old blocks freed),
// which rollbacks it accepts, and shared caches (copy on write, blocks given back).
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "backend/backend.h"

namespace hearth {
namespace {

constexpr int kHeadsKv = 2, kHeadDim = 4, kRow = kHeadsKv * kHeadDim;
constexpr int64_t B = KvCache::kBlockPositions;

// The value stored at (layer, position, element) by writer `salt`: keys positive, values
// negative.
float key_of(int layer, int64_t p, int e, int salt = 0) {
  return float(salt * 10000000 + layer * 100000 + p * 10 + e);
}

// Stores positions [end, end + n) of every layer with their key_of values (reserve and write
// only when commit is false).
void store(Backend& be, KvCache& kv, int n_layers, int64_t n, int salt = 0, bool commit = true) {
  const int64_t end = kv.n_past();
  kv.reserve_batch(n);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) pos[size_t(t)] = int32_t(end + t);
  for (int l = 0; l < n_layers; ++l) {
    std::vector<float> k(size_t(n * kRow)), v(k.size());
    for (int64_t t = 0; t < n; ++t)
      for (int e = 0; e < kRow; ++e) {
        k[size_t(t * kRow + e)] = key_of(l, end + t, e, salt);
        v[size_t(t * kRow + e)] = -key_of(l, end + t, e, salt);
      }
    be.kv_store(kv.view(l), Tensor(k.data(), DType::F32, {n, kRow}),
                Tensor(v.data(), DType::F32, {n, kRow}), pos.data());
  }
  if (commit) kv.commit_batch();
}

// Every valid position of every layer reads back what store() wrote: writer `salt` from
// position `from` on, writer 0 before.
void expect_readable(const KvCache& kv, int n_layers, int salt = 0, int64_t from = 0) {
  for (int l = 0; l < n_layers; ++l) {
    const KvView view = kv.view(l);
    ASSERT_TRUE(view.paged());
    EXPECT_EQ(view.end, kv.n_past());
    int64_t seen = 0;
    view.for_each_run(view.first, view.end - view.first,
                      [&](int64_t p0, int64_t count, std::byte* keys, std::byte* values) {
                        for (int64_t j = 0; j < count; ++j)
                          for (int e = 0; e < kRow; ++e) {
                            const float k = reinterpret_cast<const float*>(keys)[j * kRow + e];
                            const float v = reinterpret_cast<const float*>(values)[j * kRow + e];
                            const int by = p0 + j >= from ? salt : 0;
                            ASSERT_EQ(k, key_of(l, p0 + j, e, by))
                                << "layer " << l << " pos " << p0 + j;
                            ASSERT_EQ(v, -key_of(l, p0 + j, e, by));
                          }
                        seen += count;
                      });
    EXPECT_EQ(seen, view.end - view.first);
  }
}

TEST(KvCache, PagedCacheHoldsWholeBlocksAndReadsBack) {
  auto be = make_cpu_backend();
  const int n_layers = 3;
  KvCache kv(*be, {0, 0, 0}, kHeadsKv, kHeadDim);
  const size_t block_bytes = size_t(2 * n_layers * B * kRow) * sizeof(float);
  EXPECT_EQ(kv.bytes(), 0u);
  EXPECT_EQ(kv.bytes_after(1), block_bytes);
  store(*be, kv, n_layers, 1);
  EXPECT_EQ(kv.bytes(), block_bytes);
  store(*be, kv, n_layers, B - 1);  // fills the first block exactly
  EXPECT_EQ(kv.bytes(), block_bytes);
  EXPECT_EQ(kv.bytes_after(1), 2 * block_bytes);
  store(*be, kv, n_layers, 2 * B + 3);  // a batch across three blocks
  EXPECT_EQ(kv.n_past(), 3 * B + 3);
  EXPECT_EQ(kv.bytes(), 4 * block_bytes);
  for (int i = 0; i < 5; ++i) store(*be, kv, n_layers, 1);
  expect_readable(kv, n_layers);
  EXPECT_EQ(kv.view(0).first, 0);
}

TEST(KvCache, SlidingLayersFreeBlocksOutOfReach) {
  auto be = make_cpu_backend();
  const int window = 10;
  // Layers 0 and 2 attend to everything, 1 and 3 to a window: two block tables.
  KvCache kv(*be, {0, window, 0, window}, kHeadsKv, kHeadDim);
  const size_t group_block = size_t(2 * 2 * B * kRow) * sizeof(float);
  store(*be, kv, 4, 5);
  for (int i = 0; i < 5 * B; ++i) store(*be, kv, 4, 1);
  expect_readable(kv, 4);
  const int64_t end = kv.n_past();
  // The window keeps end - (window - 1) - the largest batch (5) on: whole blocks from there.
  const int64_t keep = end - (window - 1) - 5;
  EXPECT_EQ(kv.view(1).first, keep / B * B);
  EXPECT_EQ(kv.view(0).first, 0);
  const size_t full = size_t((end + B - 1) / B) * group_block;
  const size_t sliding = size_t((end + B - 1) / B - keep / B) * group_block;
  EXPECT_EQ(kv.bytes(), full + sliding);
  EXPECT_LE(sliding, 2 * group_block);
}

TEST(KvCache, RollbackWithinReachOnly) {
  auto be = make_cpu_backend();
  const int window = 8;
  KvCache kv(*be, {0, window}, kHeadsKv, kHeadDim);
  store(*be, kv, 2, 3 * B);
  for (int i = 0; i < 2 * B; ++i) store(*be, kv, 2, 1);
  const int64_t end = kv.n_past();
  const int64_t first = kv.view(1).first;
  ASSERT_GT(first, 0);
  // A query at n needs n - window + 1 on: refused once that is below the window's first.
  EXPECT_FALSE(kv.truncate(first + window - 2));
  EXPECT_EQ(kv.n_past(), end);
  EXPECT_TRUE(kv.truncate(first + window - 1));
  EXPECT_EQ(kv.n_past(), first + window - 1);
  // The rolled-back positions are written again; the memory stays.
  const size_t bytes = kv.bytes();
  store(*be, kv, 2, 3);
  EXPECT_EQ(kv.bytes(), bytes);
  expect_readable(kv, 2);

  // Full attention goes back anywhere.
  KvCache full(*be, {0}, kHeadsKv, kHeadDim);
  store(*be, full, 1, 2 * B);
  EXPECT_TRUE(full.truncate(1));
  store(*be, full, 1, B);
  expect_readable(full, 1);
  EXPECT_TRUE(full.truncate(0));
  EXPECT_EQ(full.n_past(), 0);
}

TEST(KvCache, SharedCachesCopyABlockBeforeWritingWhatAnotherReads) {
  auto be = make_cpu_backend();
  const int64_t alive = KvCache::blocks_alive();
  {
    KvCache a(*be, {0, 0}, kHeadsKv, kHeadDim);
    store(*be, a, 2, B + 36);
    const size_t block_bytes = size_t(2 * 2 * B * kRow) * sizeof(float);
    EXPECT_EQ(KvCache::blocks_alive(), alive + 2);
    std::optional<KvCache> b(a.share());
    EXPECT_EQ(b->n_past(), a.n_past());
    EXPECT_EQ(KvCache::blocks_alive(), alive + 2);  // nothing copied
    EXPECT_EQ(a.bytes(), block_bytes);              // two blocks, each half a's
    EXPECT_EQ(a.bytes_after(1), block_bytes);       // appending copies nothing
    EXPECT_EQ(b->bytes_after(1), block_bytes);
    // Both take position B + 36 in one step: the second to claim the shared block copies it.
    store(*be, a, 2, 1, /*salt=*/1, /*commit=*/false);
    store(*be, *b, 2, 1, /*salt=*/2, /*commit=*/false);
    a.commit_batch();
    b->commit_batch();
    EXPECT_EQ(KvCache::blocks_alive(), alive + 3);
    expect_readable(a, 2, 1, B + 36);
    expect_readable(*b, 2, 2, B + 36);
    // A rollback into the shared first block, then a write there: copied again, a unchanged.
    EXPECT_TRUE(b->truncate(10));
    EXPECT_EQ(b->bytes_after(5), b->bytes() + block_bytes);
    store(*be, *b, 2, 5, /*salt=*/3);
    EXPECT_EQ(KvCache::blocks_alive(), alive + 4);
    expect_readable(*b, 2, 3, 10);
    expect_readable(a, 2, 1, B + 36);
    // Alone again, a writes its blocks in place.
    b.reset();
    EXPECT_EQ(KvCache::blocks_alive(), alive + 2);
    EXPECT_TRUE(a.truncate(3));
    store(*be, a, 2, 4, /*salt=*/4);
    EXPECT_EQ(KvCache::blocks_alive(), alive + 2);
    expect_readable(a, 2, 4, 3);
  }
  EXPECT_EQ(KvCache::blocks_alive(), alive);
}

}  // namespace
}  // namespace hearth
