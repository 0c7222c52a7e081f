// The CPU communicator: the ranks of a tensor-parallel model as threads of one process, sharing
// memory. A collective publishes each rank's buffer, meets the others at a barrier, and reads
// their buffers directly. An all-reduce splits the elements among the ranks (each sums its part
// over every rank's buffer, in rank order, into a shared result) and then every rank copies the
// result back: two barriers and one pass over the data per rank, whatever the world size.
//
// Failure: a rank that throws outside a collective would leave the others waiting for it
// forever. Whoever runs the ranks (RankThreads) calls abort() when one fails: every collective
// in progress or yet to come then throws CollectiveAborted, until reset() once all ranks have
// returned. A size mismatch between ranks is seen by all of them at the same barrier, so each
// throws hearth::Error and the group stays usable.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace hearth {

class CpuCommGroup {
 public:
  explicit CpuCommGroup(int world);
  ~CpuCommGroup();
  CpuCommGroup(const CpuCommGroup&) = delete;
  CpuCommGroup& operator=(const CpuCommGroup&) = delete;

  int world() const { return world_; }
  // Rank r's communicator (lives as long as the group).
  Communicator& rank(int r);

  // A rank failed: wakes every rank waiting in a collective and makes it, and every later
  // collective, throw CollectiveAborted until reset().
  void abort();
  bool aborted() const;
  // Makes an aborted group usable again; only when no rank is inside a collective.
  void reset();

 private:
  class Rank;
  // What a rank published for the collective in progress.
  struct Slot {
    const float* src = nullptr;
    size_t count = 0;                   // all_reduce_sum
    int64_t rows = 0;                   // all_gather_columns
    std::span<const int64_t> widths{};  // all_gather_columns
  };

  // Waits until every rank has arrived. The last to arrive runs `last` first (under the lock,
  // before anyone leaves): the place to check that the ranks agree and to size shared memory.
  template <class Last>
  void arrive_and_wait(Last&& last);
  void arrive_and_wait();
  void all_reduce_sum(int r, float* data, size_t count);
  void all_gather_columns(int r, const float* mine, int64_t rows, std::span<const int64_t> widths,
                          float* out);

  const int world_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<Slot> slots_;
  std::vector<float> sum_;  // the all-reduce's result, shared
  std::string mismatch_;    // set by the last arrival when the ranks' arguments disagree

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

}  // namespace hearth
