// ThreadPool: a fixed team of threads (the caller is thread 0) that runs one data-parallel job
// at a time. Workers spin briefly between jobs, then sleep, so back-to-back ops in a forward
// pass pay microseconds, not a futex wake each. Jobs must not throw.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace hearth {

class ThreadPool {
 public:
  // n_threads <= 0 means one per available core.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls job(thread_index, n_threads) once on every thread; returns when all are done.
  void run(const std::function<void(int thread, int n_threads)>& job);

  // Splits [0, n) into contiguous chunks of at least `grain` and calls body(begin, end) on them.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t begin, int64_t end)>& body);

  // The process-wide pool that ops use; sized by set_global_threads (default: all cores).
  static ThreadPool& global();
  static void set_global_threads(int n_threads);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

int available_cores();

}  // namespace hearth
