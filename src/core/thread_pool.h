// ThreadPool: a fixed team of threads (the caller is one of them) that runs one data-parallel
// job at a time, split into tasks 0..n-1 that whichever thread is running claims. So a thread
// that the OS has descheduled (more threads than free cores, a busy neighbour) holds up at most
// the task it already claimed, not a share fixed in advance.
// Waiting threads (idle workers, the caller waiting for the last task) spin for a bounded time,
// then sleep on a futex: back-to-back ops in a forward pass pay no wake-up when every thread has
// a core, and a waiter never burns the time slice a descheduled peer needs. Jobs must not throw.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "core/cpu_limit.h"

namespace hearth {

struct ThreadPoolOptions {
  // <= 0: one thread per CPU this process may use (available_cores()).
  int n_threads = 0;
  // How long a waiting thread polls before it sleeps: longer than nearly every gap between two
  // ops of a decode step, far shorter than a scheduler time slice (docs/design-notes.md).
  std::chrono::microseconds spin{100};
  // Used instead of `spin` when n_threads is above available_cores(): some thread is always
  // waiting for a core then, and a poll would only take the core from it.
  std::chrono::microseconds spin_oversubscribed{0};
};

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads = 0) : ThreadPool(ThreadPoolOptions{n_threads}) {}
  explicit ThreadPool(const ThreadPoolOptions& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls job(task, n_threads) once for every task in [0, n_threads), concurrently on the pool's
  // threads; returns when all are done. One thread may run several tasks one after another, so a
  // task must not wait for another task of the same job.
  void run(const std::function<void(int task, int n_threads)>& job);

  // Splits [0, n) into contiguous chunks of at least `grain` (at most one per thread, the same
  // split whichever thread runs each) and calls body(begin, end) on them.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t begin, int64_t end)>& body);

  // The process-wide pool that ops use; sized by set_global_threads (default: available_cores()).
  static ThreadPool& global();
  // Warns when n_threads is above available_cores().
  static void set_global_threads(int n_threads);

 private:
  void run_tasks(int n_tasks, const std::function<void(int, int)>& job);
  void worker_loop();
  // Claims and runs tasks of the current job until none is left.
  void run_claimed_tasks();
  // Returns once pred(word's value) holds: polls for spin_, then sleeps on the word, counted in
  // `sleepers` so that whoever changes the word knows whether to wake anyone.
  template <typename Pred>
  uint32_t wait_until(std::atomic<uint32_t>& word, Pred pred, std::atomic<int>& sleepers);

  int n_threads_;
  std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;

  // The current job: its generation (high 32 bits), task count (bits 16..31) and next unclaimed
  // task (low 16 bits), changed by compare-and-swap so a claim names the job it belongs to.
  std::atomic<uint64_t> claim_{0};
  const std::function<void(int, int)>* job_ = nullptr;  // read only by a thread holding a claim
  std::atomic<uint32_t> done_{0};                       // tasks of the current job finished
  std::atomic<uint32_t> generation_{0};                 // idle workers sleep on this
  std::atomic<int> sleeping_workers_{0};
  std::atomic<int> sleeping_caller_{0};
  uint32_t next_generation_ = 0;  // the caller's own count
  std::atomic<bool> stop_{false};
};

}  // namespace hearth
