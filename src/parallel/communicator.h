// Communicator: the collectives a tensor-parallel model needs between its ranks, behind an
// interface so the sharded model logic runs (and is tested) on any machine. Each rank holds its
// own Communicator; every rank of a group must call the same collectives in the same order with
// matching sizes (as with NCCL or MPI). The CPU implementation (cpu_communicator.h) runs the ranks
// as threads of one process; a GPU one would wrap an NCCL communicator per device.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"

namespace hearth {

// Thrown by a collective that another rank abandoned (it failed and the group was aborted):
// the error that matters is that rank's, not this one.
class CollectiveAborted : public Error {
 public:
  using Error::Error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;

  // In place on every rank: data[i] = Σ over ranks of data[i], added in rank order
  // (((d0 + d1) + d2) + ...) so the result is the same bits on every rank and whatever the
  // threads' timing. count must be the same on every rank.
  virtual void all_reduce_sum(float* data, size_t count) = 0;

  // Every rank holds a [rows, widths[rank]] row-major block (a slice of each row: its share of
  // the columns); afterwards `out` on every rank is the [rows, Σ widths] matrix in which rank r's
  // block fills the columns from Σ_{k<r} widths[k]. rows and widths must agree on every rank.
  virtual void all_gather_columns(const float* mine, int64_t rows, std::span<const int64_t> widths,
                                  float* out) = 0;

  // Returns once every rank has called it.
  virtual void barrier() = 0;
};

// The part [begin, end) of `total` items (heads, vocabulary rows, channels) that `rank` of `world`
// holds: contiguous, in rank order, sizes differing by at most one.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
inline ShardRange shard_range(int64_t total, int rank, int world) {
  return {total * rank / world, total * (rank + 1) / world};
}

}  // namespace hearth
