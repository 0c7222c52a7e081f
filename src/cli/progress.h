// A progress line on stderr for the waits a user sees: loading weights, prefilling a long prompt.
// Drawn only when stderr is a terminal, only once the wait has lasted half a second (short waits
// do not flicker), redrawn in place at most ten times a second, and erased when done.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace hearth::cli {

class ProgressLine {
 public:
  // `label` leads the line ("loading weights"); `unit` names the amounts ("GB", "tokens");
  // `scale` divides the raw counts (1e9 for bytes shown in GB).
  ProgressLine(std::string label, std::string unit, double scale);
  ~ProgressLine();  // erase()
  void update(int64_t done, int64_t total);
  // Erases the line; when it was drawn and `summary` is set, leaves "label: N unit in S s (R/s)".
  void erase(bool summary = false);
  bool drawn() const { return drawn_; }

 private:
  std::string label_, unit_;
  double scale_;
  bool enabled_;
  bool drawn_ = false;
  int64_t done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace hearth::cli
