// Routed (token, slot) pairs grouped by expert, so that each expert runs once over all the rows
// routed to it (the GPU's grouped MoE path; tests/unit/expert_rows_test.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace hearth {

struct ExpertRows {
  std::vector<int64_t> offset;  // [E + 1]: expert e's rows are [offset[e], offset[e + 1])
  std::vector<int32_t> src;     // [n·k]: the token of each row, ascending within an expert
  std::vector<int32_t> pos;     // [n·k]: the row of pair (t, j), at t·k + j
  int64_t active = 0;           // experts with at least one row

  // Counting sort of ids [n, k] (row-major; each in [0, E)); throws hearth::Error naming an id
  // out of range. Reuses its vectors' memory from call to call.
  void group(const int32_t* ids, int64_t n, int64_t k, int64_t E);

 private:
  std::vector<int64_t> cursor_;
};

}  // namespace hearth
