// The one-kernel decode step's timing report (HEARTH_DECODE_TRACE=1, decode_step.h): host
// formatting of the clock64 marks the kernel leaves, one line per phase.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "backend/cuda/decode_step.h"

namespace hearth::cuda {

std::string decode_step_trace_summary(const unsigned long long* t, int n_layers, int blocks,
                                      double cycles_per_us) {
  static const char* const kNames[kStepPhases] = {"norm+qkv", "attention", "o+add", "norm+gate/up",
                                                  "down+add"};
  std::string out = fmt::format(
      "one-kernel decode trace ({} layers, {} blocks), µs per layer, averaged over layers:\n"
      "  phase                 work mean  work max   wait min  wait mean\n",
      n_layers, blocks);
  auto at = [&](int event, int b) { return double(t[size_t(event) * blocks + b]); };
  double total = 0.0;
  for (int p = 0; p < kStepPhases; ++p) {
    double work_mean = 0, work_max = 0, wait_min = 0, wait_mean = 0;
    for (int il = 0; il < n_layers; ++il) {
      const int arrive = 1 + (il * kStepPhases + p) * 2;
      const int before = arrive == 1 ? 0 : arrive - 1;  // the previous departure (or the start)
      double wmax = 0, wsum = 0, bmin = 1e300, bsum = 0;
      for (int b = 0; b < blocks; ++b) {
        const double work = at(arrive, b) - at(before, b), wait = at(arrive + 1, b) - at(arrive, b);
        wmax = std::max(wmax, work);
        wsum += work;
        bmin = std::min(bmin, wait);
        bsum += wait;
      }
      work_mean += wsum / blocks;
      work_max += wmax;
      wait_min += bmin;
      wait_mean += bsum / blocks;
    }
    const double k = 1.0 / (n_layers * cycles_per_us);
    out += fmt::format("  {:<20} {:9.2f} {:9.2f} {:10.2f} {:10.2f}\n", kNames[p], work_mean * k,
                       work_max * k, wait_min * k, wait_mean * k);
    total += (work_mean + wait_mean) * k;
  }
  out += fmt::format("  per layer (block 0 clock): {:.2f} µs; sum of means {:.2f} µs\n",
                     (at(n_layers * kStepPhases * 2, 0) - at(0, 0)) / (n_layers * cycles_per_us),
                     total);
  return out;
}

}  // namespace hearth::cuda
