// The progress of a pull on stderr: on a terminal one line redrawn in place (a bar, bytes,
// MB/s over the last seconds, ETA, files done); otherwise (a log, CI) plain lines: one per file
// fetched and one per tenth of the bytes. Safe to call from every download thread.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>

namespace hearth::hub {

class PullProgress {
 public:
  PullProgress(uint64_t total_bytes, size_t n_files, bool terminal, std::FILE* out = stderr);

  // Bytes on disk changed by `on_disk` (negative when a partial file is dropped), `network` of
  // them received just now.
  void bytes(int64_t on_disk, uint64_t network);
  void file_done(const std::string& path, uint64_t size);
  // A line of its own (a retry, a wait), printed above the bar.
  void note(const std::string& line);
  // Draws the final state and ends the bar's line.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  void draw(bool force);  // mu_ held
  std::string status_line(Clock::time_point now);
  double speed(Clock::time_point now) const;

  std::mutex mu_;
  const uint64_t total_;
  const size_t n_files_;
  const bool terminal_;
  std::FILE* out_;
  int64_t on_disk_ = 0;
  uint64_t network_ = 0;
  size_t files_done_ = 0;
  int last_tenth_ = 0;
  bool finished_ = false;
  Clock::time_point last_draw_{};
  std::deque<std::pair<Clock::time_point, uint64_t>> samples_;  // (when, network bytes so far)
};

// "1:05", "2:03:00": a duration for an ETA.
std::string format_eta(double seconds);

}  // namespace hearth::hub
