// bench_thread_pool: what one ThreadPool job costs beyond its work. Each job's tasks busy-wait
// `work` µs, and the caller busy-waits `gap` µs between jobs (the serial code between two ops of
// a forward pass); overhead per job = (wall time − jobs × (work + gap)) / jobs, min / median /
// max over 5 trials. Gaps longer than the pool's poll show the cost of waking a sleeping worker.
// Usage: bench_thread_pool [--threads N] [--work US] [--jobs N] [--spin US] [--gaps A,B,...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace {

using Clock = std::chrono::steady_clock;

void busy_for(double us) {
  const auto end = Clock::now() + std::chrono::nanoseconds(int64_t(us * 1000));
  while (Clock::now() < end) {
  }
}

std::vector<double> parse_list(const char* text) {
  std::vector<double> out;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    out.push_back(std::strtod(p, &end));
    if (end == p) break;
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  hearth::ThreadPoolOptions options;
  options.n_threads = 2;
  double work = 20;
  int jobs = 3000;
  std::vector<double> gaps = {0, 10, 40, 80, 150, 300};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--threads") {
      options.n_threads = std::atoi(value);
    } else if (flag == "--work") {
      work = std::atof(value);
    } else if (flag == "--jobs") {
      jobs = std::max(1, std::atoi(value));
    } else if (flag == "--spin") {
      options.spin = options.spin_oversubscribed = std::chrono::microseconds(std::atoi(value));
    } else if (flag == "--gaps") {
      gaps = parse_list(value);
    } else {
      std::fprintf(stderr, "unknown option %s\n", flag.c_str());
      return 2;
    }
  }
  hearth::ThreadPool pool(options);
  std::printf("threads %d (available %d), task work %.0f us, %d jobs per trial\n", pool.size(),
              hearth::available_cores(), work, jobs);
  std::printf("| gap us | overhead us/job: min | median | max |\n|---|---|---|---|\n");
  for (double gap : gaps) {
    std::vector<double> overhead;
    for (int trial = 0; trial < 5; ++trial) {
      const auto t0 = Clock::now();
      for (int j = 0; j < jobs; ++j) {
        pool.run([&](int, int) { busy_for(work); });
        busy_for(gap);
      }
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      overhead.push_back(us / jobs - work - gap);
    }
    std::sort(overhead.begin(), overhead.end());
    std::printf("| %.0f | %.2f | %.2f | %.2f |\n", gap, overhead[0], overhead[2], overhead[4]);
  }
  return 0;
}
