// CPU matvec for trellis-coded weights (src/quant/trellis.h), the decode path: y = x · Wᵀ for a
// few input rows, decoding the 1MAD code in registers (W is never materialised), f32 accumulation.
// rows/cols are the LOGICAL W [out = rows, in = cols]:
//   axis 1: codes [rows, cols·k/32], scales [rows]; a gather (one dot product per output).
//   axis 0: codes [cols, rows·k/32] (Wᵀ coded along the output dim), scales [cols]; a scatter
//           (each code row times one input element, added into all outputs).
// x [n, cols] and y [n, rows] are contiguous f32; y must not alias x. Multithreaded over output
// ranges on `pool`, so threads never write the same output. Any n works; 1..8 is the target.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"

namespace hearth::cpu {

void trellis_matvec(const uint32_t* codes, const uint16_t* scales_f16, int64_t rows, int64_t cols,
                    int k, int axis, const float* x, int64_t n, float* y, ThreadPool& pool);

// The kernel family in use: "avx512" (with VNNI and VBMI2), "avx2" or "generic".
std::string trellis_matvec_isa();

namespace detail {

// Every family this CPU can run, best first.
std::vector<std::string> trellis_matvec_isas();
// trellis_matvec on one family (tests and benchmarks); isa from trellis_matvec_isas().
void trellis_matvec_with(std::string_view isa, const uint32_t* codes, const uint16_t* scales_f16,
                         int64_t rows, int64_t cols, int k, int axis, const float* x, int64_t n,
                         float* y, ThreadPool& pool);

}  // namespace detail

}  // namespace hearth::cpu
