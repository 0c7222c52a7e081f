// The one-kernel decode step's timing report (HEARTH_DECODE_TRACE=1, decode_step.h): host
// formatting of the clock64 marks the kernel leaves, one line per phase, one table per kind of
// layer (attention, Gated DeltaNet).
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/decode_step.h"

namespace hearth::cuda {

namespace {

// The upper median (0 for none); v is reordered.
double median(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The table over the layers il with layer_of(il) true.
template <typename Pick>
std::string phase_table(const unsigned long long* t, int n_layers, int blocks, double cycles_per_us,
                        const char* const (&names)[kStepPhases], int heads, Pick layer_of) {
  auto at = [&](int event, int b) { return double(t[size_t(event) * blocks + b]); };
  std::string out = "  phase                 work mean  work max   wait min  wait mean\n";
  int n = 0;
  for (int il = 0; il < n_layers; ++il) n += layer_of(il) ? 1 : 0;
  double total = 0.0, head_max = 0.0, other_max = 0.0;  // phase 2's work, by kind of block
  for (int p = 0; p < kStepPhases; ++p) {
    double work_mean = 0, work_max = 0, wait_min = 0, wait_mean = 0;
    std::vector<double> own(size_t(blocks), 0.0);  // each block's work summed over the layers
    for (int il = 0; il < n_layers; ++il) {
      if (!layer_of(il)) continue;
      const int arrive = 1 + (il * kStepPhases + p) * 2;
      const int before = arrive == 1 ? 0 : arrive - 1;  // the previous departure (or the start)
      double wmax = 0, wsum = 0, bmin = 1e300, bsum = 0, hmax = 0, omax = 0;
      for (int b = 0; b < blocks; ++b) {
        const double work = at(arrive, b) - at(before, b), wait = at(arrive + 1, b) - at(arrive, b);
        own[size_t(b)] += work;
        wmax = std::max(wmax, work);
        wsum += work;
        double& kind_max = b < heads ? hmax : omax;
        kind_max = std::max(kind_max, work);
        bmin = std::min(bmin, wait);
        bsum += wait;
      }
      if (p == 1) {
        head_max += hmax;
        other_max += omax;
      }
      work_mean += wsum / blocks;
      work_max += wmax;
      wait_min += bmin;
      wait_mean += bsum / blocks;
    }
    const double k = 1.0 / (n * cycles_per_us);
    out += fmt::format("  {:<20} {:9.2f} {:9.2f} {:10.2f} {:10.2f}\n", names[p], work_mean * k,
                       work_max * k, wait_min * k, wait_mean * k);
    total += (work_mean + wait_mean) * k;
    if (p == 1) {
      out += fmt::format("    work max of the {} heads' blocks {:.2f}, of the others {:.2f}\n",
                         heads, head_max * k, other_max * k);
    } else {
      // Whether the same blocks are slow in every layer (the slowest block's own mean near the
      // work max) or a different one each time (near the median); and whether the blocks that
      // had a head in phase 2 (and may have work of it left, as the mixer's state stores) are
      // slower than the others.
      const auto slowest = std::max_element(own.begin(), own.end()) - own.begin();
      const int split = std::clamp(heads, 0, blocks);
      std::vector<double> all = own, with_head(own.begin(), own.begin() + split),
                          others(own.begin() + split, own.end());
      out += fmt::format(
          "    blocks' own means: fastest {:.2f}, median {:.2f}, slowest {:.2f} (block {}); "
          "median of the heads' blocks {:.2f}, of the others {:.2f}\n",
          *std::min_element(own.begin(), own.end()) * k, median(all) * k, own[size_t(slowest)] * k,
          slowest, median(with_head) * k, median(others) * k);
    }
  }
  out += fmt::format("  sum of means {:.2f} µs per layer\n", total);
  return out;
}

}  // namespace

std::string decode_step_trace_summary(const unsigned long long* t, int n_layers, int blocks,
                                      double cycles_per_us, const std::vector<bool>& linear,
                                      const int (&heads)[2]) {
  static const char* const kNames[kStepPhases] = {"norm+qkv", "attention", "o+add", "norm+gate/up",
                                                  "down+add"};
  static const char* const kLinearNames[kStepPhases] = {"norm+in_proj", "gated deltanet",
                                                        "out_proj+add", "norm+gate/up", "down+add"};
  auto is_linear = [&](int il) { return size_t(il) < linear.size() && linear[size_t(il)]; };
  int n_linear = 0;
  for (int il = 0; il < n_layers; ++il) n_linear += is_linear(il) ? 1 : 0;
  std::string out =
      fmt::format("one-kernel decode trace ({} layers, {} blocks):\n", n_layers, blocks);
  if (n_linear < n_layers) {
    out += fmt::format("{} attention layers, µs per layer, averaged over them:\n",
                       n_layers - n_linear);
    out += phase_table(t, n_layers, blocks, cycles_per_us, kNames, heads[0],
                       [&](int il) { return !is_linear(il); });
  }
  if (n_linear > 0) {
    out += fmt::format("{} Gated DeltaNet layers, µs per layer, averaged over them:\n", n_linear);
    out += phase_table(t, n_layers, blocks, cycles_per_us, kLinearNames, heads[1], is_linear);
  }
  out += fmt::format("per layer (block 0 clock): {:.2f} µs\n",
                     (double(t[size_t(n_layers * kStepPhases * 2) * blocks]) - double(t[0])) /
                         (n_layers * cycles_per_us));
  return out;
}

}  // namespace hearth::cuda
