// KvCache: one sequence's attention keys and values, per layer, in the backend's memory and
// activation dtype. Valid positions of every layer are [first, end); end is the same for all.
//
// The cache is a table of fixed-size blocks of kBlockPositions positions in the backend's
// memory: nothing is copied as a sequence grows, and memory follows the positions held to within
// a block. Layers with the same sliding window form a group with one table; a block holds its
// positions for every layer of the group (each layer's keys, then its values). A sliding-window
// group frees the blocks no query can reach any more: it keeps window - 1 + the largest batch so
// far behind the end, so a batch never overwrites a key one of its own queries needs, and a
// rollback of up to one batch (speculative decoding) always succeeds.
//
// A cache can be shared (share()): the copy holds the same blocks, and whichever cache then
// writes a position another holder of that block may read copies the block first (copy on
// write), so prompts with a common prefix hold its blocks once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace hearth {

class KvCache {
 public:
  // Positions a block of a paged cache holds.
  static constexpr int64_t kBlockPositions = 64;

  // windows[i] is layer i's sliding window (0 = full attention).
  KvCache(Backend& backend, std::vector<int> windows, int n_head_kv, int head_dim);

  int64_t n_past() const { return end_; }
  // Makes room for positions [end, end + n_tokens); views then include the batch's positions,
  // so its queries see its own keys. Call before storing a batch.
  void reserve_batch(int64_t n_tokens);
  // Marks the reserved batch as written (after every layer stored it).
  void commit_batch();
  // Drops positions >= n (rollback); the memory stays for the positions that follow. A
  // sliding-window layer cannot recover positions it dropped, so a rollback that would leave a
  // query at n without keys it needs is refused by returning false.
  bool truncate(int64_t n);
  KvView view(int layer) const;
  // A cache holding the same positions in the same blocks.
  KvCache share() const;
  // The memory held: a block shared with others counts for its share.
  size_t bytes() const;
  // bytes() once n_more more positions are stored (the memory's growth included).
  size_t bytes_after(int64_t n_more) const;
  // The positions of one full-attention layer a cache holding n positions has memory for.
  static int64_t positions_held(int64_t n);
  // Blocks of caches alive in the process (tests check that finished, cancelled and evicted
  // sequences give theirs back).
  static int64_t blocks_alive();

 private:
  struct Block {
    Block(DeviceBuffer memory_, int64_t filled_);
    ~Block();
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    DeviceBuffer memory;
    // Rows written or claimed (by a reserved batch) from the block's start, by any holder: a
    // holder writing below this while others hold the block copies it first.
    int64_t filled = 0;
  };
  struct Group {
    int window = 0;
    int n_layers = 0;
    std::vector<std::shared_ptr<Block>>
        blocks;                     // blocks[i]: positions [i, i + 1) · kBlockPositions
    std::vector<std::byte*> table;  // blocks[i].data(); null once freed
    int64_t first = 0;              // first valid position
  };
  struct Place {
    int group = 0;
    int index = 0;  // the layer's place among its group's
  };
  // The first position a sliding window of `window` must keep once `end` positions are stored.
  int64_t keep_from(int window) const;
  size_t block_bytes(const Group& g) const;
  // Gives the group's blocks that positions [end, end + n_tokens) fall in to this cache alone
  // (copies of shared blocks another holder may read there) and claims those rows.
  void claim_rows(Group& g, int64_t n_tokens);
  // Whether writing block `index` from the end on would write rows another holder may read (it
  // is then copied first).
  bool writes_shared_rows(const std::shared_ptr<Block>& block, int64_t index) const;

  Backend* backend_;
  std::vector<Group> groups_;
  std::vector<Place> places_;  // per layer
  int64_t row_elems_;          // n_head_kv * head_dim
  size_t row_bytes_;
  int64_t end_ = 0;
  int64_t pending_ = 0;    // tokens of the batch being written
  int64_t max_batch_ = 0;  // the largest batch stored so far
};

}  // namespace hearth
