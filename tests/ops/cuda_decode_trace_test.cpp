// The one-kernel decode step's timing report (decode_step_trace_summary, HEARTH_DECODE_TRACE=1)
// on made-up clock marks whose averages are known: host code only, so it runs without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/decode_step.h"

namespace hearth::cuda {
namespace {

// Two layers (an attention layer, then a Gated DeltaNet layer) on 3 blocks. Block b works
// 100·il + 10·(p + 1) + b cycles in phase p of layer il and then waits 1 + b cycles, so at one
// cycle per µs every figure of the report is known.
TEST(CudaDecodeTrace, SummaryAveragesEachKindOfLayer) {
  constexpr int kLayers = 2, kBlocks = 3;
  std::vector<unsigned long long> marks(size_t(1 + kLayers * kStepPhases * 2) * kBlocks);
  for (int b = 0; b < kBlocks; ++b) {
    unsigned long long t = 1000;  // the clock is not zero at the start
    marks[size_t(b)] = t;
    for (int il = 0; il < kLayers; ++il)
      for (int p = 0; p < kStepPhases; ++p) {
        const int arrive = 1 + (il * kStepPhases + p) * 2;
        t += 100 * il + 10 * (p + 1) + b;
        marks[size_t(arrive) * kBlocks + b] = t;
        t += 1 + b;
        marks[size_t(arrive + 1) * kBlocks + b] = t;
      }
  }
  const int heads[2] = {2, 1};  // blocks 0-1 have attention heads, block 0 a mixer head
  const std::string s =
      decode_step_trace_summary(marks.data(), kLayers, kBlocks, 1.0, {false, true}, heads);
  auto has = [&](const std::string& line) {
    EXPECT_NE(s.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << s;
  };
  has("1 attention layers, µs per layer");
  has("  attention                21.00     22.00       1.00       2.00\n");
  has("    work max of the 2 heads' blocks 21.00, of the others 22.00\n");
  // Block b's work in phase p of layer il is 100 il + 10 (p + 1) + b: block 2 is the slowest.
  has("  norm+gate/up             41.00     42.00       1.00       2.00\n"
      "    blocks' own means: fastest 40.00, median 41.00, slowest 42.00 (block 2); median of the "
      "heads' blocks 41.00, of the others 42.00\n");
  // In the Gated DeltaNet table only block 0 had a head: 140 + b in gate/up.
  has("    blocks' own means: fastest 140.00, median 141.00, slowest 142.00 (block 2); median of "
      "the heads' blocks 140.00, of the others 142.00\n");
  has("  sum of means 165.00 µs per layer\n");  // Σ_p (10(p+1) + 1) + 5 · 2
  has("1 Gated DeltaNet layers, µs per layer");
  has("  gated deltanet          121.00    122.00       1.00       2.00\n");
  has("    work max of the 1 heads' blocks 120.00, of the others 122.00\n");
  has("  sum of means 665.00 µs per layer\n");
  has("per layer (block 0 clock): 405.00 µs\n");  // (155 + 655) / 2
}

}  // namespace
}  // namespace hearth::cuda
#endif
