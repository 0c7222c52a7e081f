// The threads that run request handlers (which may block for a whole generation), waking the most
// recently idle thread first (LIFO). Waking idle threads in turn would land successive requests
// on threads that have not run for a while, or never: each first request on a thread pays its
// cold thread-local state (tokenizer caches, regex JIT stacks, ~1-2 ms, all of it in time to
// first token) and cold CPU caches. With LIFO a steady stream of requests is served by the same
// few warm threads, and the others stay asleep until concurrency needs them. Requests are still
// taken in arrival order (the job queue itself is FIFO).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth::server::http {

class WorkerPool {
 public:
  explicit WorkerPool(size_t n_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  void enqueue(std::function<void()> job);
  // Runs the jobs already queued, then joins every thread.
  void shutdown();

 private:
  struct Worker {
    std::condition_variable cv;
    bool signaled = false;
    std::thread thread;
  };
  void run(Worker& self);

  std::mutex mu_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // back = most recently idle
  bool stopping_ = false;
};

}  // namespace hearth::server::http
