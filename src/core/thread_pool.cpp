#include "core/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <memory>
#include <mutex>

#if defined(__x86_64__)
#include <immintrin.h>
#define HEARTH_PAUSE() _mm_pause()
#else
#define HEARTH_PAUSE() ((void)0)
#endif

namespace hearth {

namespace {
constexpr int kSpinIterations = 1 << 16;  // ~100 us of pause before sleeping
std::unique_ptr<ThreadPool> g_pool;
std::mutex g_pool_mutex;
}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : available_cores()) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      HEARTH_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& job) {
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  job_ = &job;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  job(0, n_threads_);
  // Spin while the workers finish; yield after a while so an oversubscribed machine (more
  // runnable threads than cores) can schedule the worker we are waiting for.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < (1 << 14)) {
      HEARTH_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t max_chunks = (n + grain - 1) / grain;
  int n_chunks = int(std::min<int64_t>(n_threads_, max_chunks));
  if (n_chunks <= 1) {
    body(0, n);
    return;
  }
  run([&](int thread, int) {
    if (thread >= n_chunks) return;
    int64_t begin = n * thread / n_chunks, end = n * (thread + 1) / n_chunks;
    if (begin < end) body(begin, end);
  });
}

ThreadPool& ThreadPool::global() {
  std::lock_guard lock(g_pool_mutex);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(0);
  return *g_pool;
}

void ThreadPool::set_global_threads(int n_threads) {
  std::lock_guard lock(g_pool_mutex);
  if (g_pool && g_pool->size() == (n_threads > 0 ? n_threads : available_cores())) return;
  g_pool.reset();
  g_pool = std::make_unique<ThreadPool>(n_threads);
}

}  // namespace hearth
