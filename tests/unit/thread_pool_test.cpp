// The thread pool's contract (every task once, every chunk once, on any thread count and spin
// budget, oversubscribed included) and the CPU-limit parsers behind its default size.
#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "core/cpu_limit.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;
using std::chrono::microseconds;

TEST(CpuLimit, QuotaRoundsUpToWholeCpus) {
  EXPECT_EQ(cgroup_cpu_limit_from(200000, 100000), 2);
  EXPECT_EQ(cgroup_cpu_limit_from(150000, 100000), 2);
  EXPECT_EQ(cgroup_cpu_limit_from(100001, 100000), 2);
  EXPECT_EQ(cgroup_cpu_limit_from(50000, 100000), 1);
  EXPECT_EQ(cgroup_cpu_limit_from(1, 100000), 1);
  EXPECT_EQ(cgroup_cpu_limit_from(-1, 100000), 0);
  EXPECT_EQ(cgroup_cpu_limit_from(100000, 0), 0);
}

TEST(CpuLimit, CgroupV2CpuMax) {
  EXPECT_EQ(cgroup_cpu_limit_v2("max 100000\n"), 0);
  EXPECT_EQ(cgroup_cpu_limit_v2("max"), 0);
  EXPECT_EQ(cgroup_cpu_limit_v2("200000 100000\n"), 2);
  EXPECT_EQ(cgroup_cpu_limit_v2("250000 100000"), 3);
  EXPECT_EQ(cgroup_cpu_limit_v2("50000 100000"), 1);
  EXPECT_EQ(cgroup_cpu_limit_v2("400000 1000000"), 1);
  EXPECT_EQ(cgroup_cpu_limit_v2("300000"), 3);  // period left out: 100000
  EXPECT_EQ(cgroup_cpu_limit_v2(""), 0);
  EXPECT_EQ(cgroup_cpu_limit_v2("lots 100000"), 0);
  EXPECT_EQ(cgroup_cpu_limit_v2("200000 soon"), 0);
  EXPECT_EQ(cgroup_cpu_limit_v2("200000 100000 7"), 0);
  EXPECT_EQ(cgroup_cpu_limit_v2("99999999999999999999999 100000"), 0);
}

TEST(CpuLimit, CgroupV1Quota) {
  EXPECT_EQ(cgroup_cpu_limit_v1("-1\n", "100000\n"), 0);
  EXPECT_EQ(cgroup_cpu_limit_v1("200000\n", "100000\n"), 2);
  EXPECT_EQ(cgroup_cpu_limit_v1("150000", "50000"), 3);
  EXPECT_EQ(cgroup_cpu_limit_v1("10000", "100000"), 1);
  EXPECT_EQ(cgroup_cpu_limit_v1("", "100000"), 0);
  EXPECT_EQ(cgroup_cpu_limit_v1("200000", "x"), 0);
}

// A fake cgroup tree under a temporary folder.
class CgroupTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("hearth_cgroup_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const fs::path& rel, const std::string& text) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << text;
  }
  fs::path root_;
};

TEST_F(CgroupTree, V2TakesTheTightestLevel) {
  write("cgroup.controllers", "cpu memory\n");
  write("outer/cpu.max", "300000 100000\n");
  write("outer/inner/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/outer/inner\n", root_), 3);
  write("outer/inner/cpu.max", "120000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit("0::/outer/inner\n", root_), 2);
  EXPECT_EQ(cgroup_cpu_limit("0::/\n", root_), 0);
  // A namespaced path the mount does not show: only the levels that exist count.
  EXPECT_EQ(cgroup_cpu_limit("0::/elsewhere/deep\n", root_), 0);
}

TEST_F(CgroupTree, V1CpuController) {
  write("cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  write("cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  write("cpu,cpuacct/box/cpu.cfs_quota_us", "150000\n");
  write("cpu,cpuacct/box/cpu.cfs_period_us", "100000\n");
  const char* self = "12:memory:/box\n4:cpu,cpuacct:/box\n1:name=systemd:/box\n0::/box\n";
  EXPECT_EQ(cgroup_cpu_limit(self, root_), 2);
  EXPECT_EQ(cgroup_cpu_limit("4:cpu,cpuacct:/\n", root_), 0);
  EXPECT_EQ(cgroup_cpu_limit("4:cpuacct:/box\n", root_), 0);  // not the cpu controller
}

TEST_F(CgroupTree, HybridReadsBoth) {
  write("unified/cgroup.controllers", "\n");
  write("unified/app/cpu.max", "400000 100000\n");
  write("cpu/cpu.cfs_quota_us", "-1\n");
  write("cpu/cpu.cfs_period_us", "100000\n");
  write("cpu/app/cpu.cfs_quota_us", "500000\n");
  write("cpu/app/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit("3:cpu:/app\n0::/app\n", root_), 4);
  EXPECT_EQ(cgroup_cpu_limit("garbage\n\n:::\n", root_), 0);
  EXPECT_EQ(cgroup_cpu_limit("", root_), 0);
}

TEST(CpuLimit, AvailableCoresWithinTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cores = available_cores();
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, CPU_COUNT(&set));
  EXPECT_EQ(ThreadPool(0).size(), cores);
}

// Every task of every job runs exactly once, whatever the spin budget and thread count.
void check_tasks_once(const ThreadPoolOptions& options, int jobs) {
  ThreadPool pool(options);
  const int n = pool.size();
  std::vector<std::atomic<int>> hits(size_t(n) * jobs);
  for (int j = 0; j < jobs; ++j) {
    pool.run([&](int task, int n_tasks) {
      ASSERT_EQ(n_tasks, n);
      ASSERT_GE(task, 0);
      ASSERT_LT(task, n);
      hits[size_t(j) * n + task].fetch_add(1, std::memory_order_relaxed);
    });
  }
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "job/task " << i;
}

TEST(ThreadPool, EveryTaskOnceWithSpin) { check_tasks_once({4, microseconds(50), {}}, 20000); }

TEST(ThreadPool, EveryTaskOnceSleepingAtOnce) {
  // No polling: every hand-over goes through the futex, the path a busy machine takes.
  check_tasks_once({4, microseconds(0), microseconds(0)}, 20000);
}

TEST(ThreadPool, EveryTaskOnceOversubscribed) {
  check_tasks_once({4 * available_cores() + 1, microseconds(50), microseconds(0)}, 2000);
}

TEST(ThreadPool, SingleThreadRunsInline) {
  ThreadPool pool(1);
  const auto caller = std::this_thread::get_id();
  int calls = 0;
  pool.run([&](int task, int n_tasks) {
    EXPECT_EQ(task, 0);
    EXPECT_EQ(n_tasks, 1);
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPool, ParallelForCoversTheRangeOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool({threads, microseconds(20), microseconds(0)});
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(4097)}) {
      for (int64_t grain : {int64_t(1), int64_t(16), int64_t(5000)}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> chunks{0};
        pool.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
          ASSERT_LT(begin, end);
          chunks.fetch_add(1);
          for (int64_t i = begin; i < end; ++i) hits[size_t(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << n << " " << i;
        const int64_t most = n == 0 ? 0 : std::min<int64_t>(threads, (n + grain - 1) / grain);
        EXPECT_EQ(chunks.load(), most) << "threads " << threads << " n " << n << " grain " << grain;
      }
    }
  }
}

TEST(ThreadPool, IdleWorkersSleep) {
  // After the spin budget, idle workers must not burn CPU: the process's CPU time over 100 ms of
  // idleness stays far below 3 threads × 100 ms.
  ThreadPool pool({4, microseconds(50), microseconds(0)});
  pool.run([](int, int) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::clock_t before = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const double cpu_ms = double(std::clock() - before) * 1000.0 / CLOCKS_PER_SEC;
  EXPECT_LT(cpu_ms, 30.0);
}

TEST(ThreadPool, GlobalPoolResizes) {
  ThreadPool::set_global_threads(3);
  EXPECT_EQ(ThreadPool::global().size(), 3);
  ThreadPool::set_global_threads(0);
  EXPECT_EQ(ThreadPool::global().size(), available_cores());
}

}  // namespace
}  // namespace hearth
