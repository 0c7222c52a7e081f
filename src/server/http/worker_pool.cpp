#include "server/http/worker_pool.h"

#include <algorithm>

namespace hearth::server::http {

WorkerPool::WorkerPool(size_t n_threads) {
  for (size_t i = 0; i < std::max<size_t>(n_threads, 1); ++i)
    workers_.push_back(std::make_unique<Worker>());
  for (auto& w : workers_) w->thread = std::thread([this, p = w.get()] { run(*p); });
}

WorkerPool::~WorkerPool() { shutdown(); }

void WorkerPool::enqueue(std::function<void()> job) {
  std::lock_guard lock(mu_);
  jobs_.push_back(std::move(job));
  if (!idle_.empty()) {
    Worker* w = idle_.back();  // the warmest thread
    idle_.pop_back();
    w->signaled = true;
    w->cv.notify_one();
  }
}

void WorkerPool::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (Worker* w : idle_) {
      w->signaled = true;
      w->cv.notify_one();
    }
    idle_.clear();
  }
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
}

void WorkerPool::run(Worker& self) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!jobs_.empty()) {
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
      continue;
    }
    if (stopping_) return;
    self.signaled = false;
    idle_.push_back(&self);
    self.cv.wait(lock, [&] { return self.signaled; });
  }
}

}  // namespace hearth::server::http
