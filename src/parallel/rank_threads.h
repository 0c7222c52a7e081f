// RankThreads: one thread per rank of a tensor-parallel model (rank 0 is the calling thread), kept
// for the model's life so a decode step does not pay for starting threads. run(fn) calls fn(rank)
// on every rank's thread at once and returns when all have returned.
//
// A rank that throws aborts the communicator group at once (the others would otherwise wait for
// it in their next collective), so every rank returns; the group is then reset and run()
// rethrows the first failure that was not a CollectiveAborted (the cause, not its echoes).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/cpu_communicator.h"

namespace hearth {

class RankThreads {
 public:
  explicit RankThreads(CpuCommGroup& group);
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int world() const { return group_.world(); }
  // fn(rank) on every rank's thread; see above for failures. Not re-entrant.
  void run(const std::function<void(int rank)>& fn);

 private:
  void worker(int rank);
  void run_rank(int rank);

  CpuCommGroup& group_;
  std::vector<std::thread> threads_;  // ranks 1..world-1
  std::mutex mutex_;
  std::condition_variable start_, finished_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int running_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;  // per rank, of the current job
};

}  // namespace hearth
