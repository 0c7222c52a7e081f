#include "parallel/rank_threads.h"

namespace hearth {

RankThreads::RankThreads(CpuCommGroup& group) : group_(group), errors_(size_t(group.world())) {
  for (int r = 1; r < group.world(); ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void RankThreads::run_rank(int rank) {
  try {
    (*job_)(rank);
  } catch (...) {
    errors_[size_t(rank)] = std::current_exception();
    group_.abort();
  }
}

void RankThreads::worker(int rank) {
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_rank(rank);
    std::lock_guard lock(mutex_);
    if (--running_ == 0) finished_.notify_one();
  }
}

void RankThreads::run(const std::function<void(int rank)>& fn) {
  {
    std::lock_guard lock(mutex_);
    job_ = &fn;
    for (auto& e : errors_) e = nullptr;
    running_ = int(threads_.size());
    ++generation_;
  }
  start_.notify_all();
  run_rank(0);
  {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
  }
  std::exception_ptr first, echo;
  for (const auto& e : errors_) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const CollectiveAborted&) {
      if (!echo) echo = e;
    } catch (...) {
      if (!first) first = e;
    }
  }
  if (group_.aborted()) group_.reset();
  if (first) std::rethrow_exception(first);
  if (echo) std::rethrow_exception(echo);
}

}  // namespace hearth
