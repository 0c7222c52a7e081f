#include "core/thread_pool.h"

#include <algorithm>
#include <memory>
#include <mutex>

#include "core/log.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define HEARTH_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define HEARTH_PAUSE() asm volatile("yield")
#else
#define HEARTH_PAUSE() ((void)0)
#endif

namespace hearth {

namespace {

// The claim word: generation | task count | next unclaimed task.
constexpr int kTaskBits = 16;
constexpr uint64_t kTaskMask = (uint64_t(1) << kTaskBits) - 1;
constexpr int kMaxThreads = int(kTaskMask);
// Polls between clock reads: a read costs about as much as a few pauses.
constexpr unsigned kPollsPerClockRead = 32;

std::unique_ptr<ThreadPool> g_pool;
std::mutex g_pool_mutex;

int resolve_threads(int n_threads) {
  return std::clamp(n_threads > 0 ? n_threads : available_cores(), 1, kMaxThreads);
}

}  // namespace

ThreadPool::ThreadPool(const ThreadPoolOptions& options)
    : n_threads_(resolve_threads(options.n_threads)),
      spin_(n_threads_ > available_cores() ? options.spin_oversubscribed : options.spin) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

template <typename Pred>
uint32_t ThreadPool::wait_until(std::atomic<uint32_t>& word, Pred pred,
                                std::atomic<int>& sleepers) {
  uint32_t value = word.load(std::memory_order_acquire);
  if (pred(value)) return value;
  if (spin_.count() > 0) {
    const auto deadline = std::chrono::steady_clock::now() + spin_;
    for (unsigned i = 1;; ++i) {
      HEARTH_PAUSE();
      value = word.load(std::memory_order_acquire);
      if (pred(value)) return value;
      if (i % kPollsPerClockRead == 0 && std::chrono::steady_clock::now() >= deadline) break;
    }
  }
  // Announce the sleep before the last look at the word; the waker changes the word before it
  // looks at the count (both sequentially consistent), so one of the two sees the other.
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  while (true) {
    value = word.load(std::memory_order_seq_cst);
    if (pred(value)) break;
    word.wait(value, std::memory_order_seq_cst);
  }
  sleepers.fetch_sub(1, std::memory_order_relaxed);
  return value;
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  while (true) {
    seen = wait_until(
        generation_, [seen](uint32_t g) { return g != seen; }, sleeping_workers_);
    if (stop_.load(std::memory_order_acquire)) return;
    run_claimed_tasks();
  }
}

void ThreadPool::run_claimed_tasks() {
  uint64_t c = claim_.load(std::memory_order_acquire);
  while (true) {
    const uint32_t next = uint32_t(c & kTaskMask);
    const uint32_t count = uint32_t((c >> kTaskBits) & kTaskMask);
    if (next >= count) return;
    if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire))
      continue;
    // The claim keeps the job alive: the caller returns only after every task is done.
    (*job_)(int(next), int(count));
    if (done_.fetch_add(1, std::memory_order_seq_cst) + 1 == count &&
        sleeping_caller_.load(std::memory_order_seq_cst) > 0)
      done_.notify_one();
    c = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run_tasks(int n_tasks, const std::function<void(int, int)>& job) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || n_threads_ == 1) {
    for (int t = 0; t < n_tasks; ++t) job(t, n_tasks);
    return;
  }
  job_ = &job;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t generation = ++next_generation_;
  claim_.store(uint64_t(generation) << (2 * kTaskBits) | uint64_t(n_tasks) << kTaskBits,
               std::memory_order_release);
  generation_.store(generation, std::memory_order_seq_cst);
  if (sleeping_workers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
  run_claimed_tasks();
  // Tasks other threads claimed may still run; their last one wakes us if we sleep.
  wait_until(
      done_, [n_tasks](uint32_t d) { return d == uint32_t(n_tasks); }, sleeping_caller_);
  job_ = nullptr;
}

void ThreadPool::run(const std::function<void(int, int)>& job) { run_tasks(n_threads_, job); }

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int n_chunks = int(std::min<int64_t>(n_threads_, max_chunks));
  if (n_chunks <= 1) {
    body(0, n);
    return;
  }
  run_tasks(n_chunks, [&](int chunk, int chunks) {
    const int64_t begin = n * chunk / chunks, end = n * (chunk + 1) / chunks;
    if (begin < end) body(begin, end);
  });
}

ThreadPool& ThreadPool::global() {
  std::lock_guard lock(g_pool_mutex);
  if (!g_pool) g_pool = std::make_unique<ThreadPool>(0);
  return *g_pool;
}

void ThreadPool::set_global_threads(int n_threads) {
  const int cores = available_cores();
  if (n_threads > cores)
    log(LogLevel::Warn,
        "{} threads asked for, but this process may use {} CPU{} (affinity and cgroup quota): "
        "the extra threads wait for a core and decode slows down",
        n_threads, cores, cores == 1 ? "" : "s");
  std::lock_guard lock(g_pool_mutex);
  if (g_pool && g_pool->size() == resolve_threads(n_threads)) return;
  g_pool.reset();
  g_pool = std::make_unique<ThreadPool>(n_threads);
}

}  // namespace hearth
