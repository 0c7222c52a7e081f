#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace hearth::cli {

namespace {

// Counts of whole things (tokens) without decimals; scaled amounts (GB) with two.
std::string amount(double value, double scale) {
  char buf[32];
  std::snprintf(buf, sizeof buf, scale == 1.0 ? "%.0f" : "%.2f", value / scale);
  return buf;
}

}  // namespace

ProgressLine::ProgressLine(std::string label, std::string unit, double scale)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      scale_(scale),
      enabled_(isatty(STDERR_FILENO) != 0) {}

ProgressLine::~ProgressLine() { erase(); }

void ProgressLine::update(int64_t done, int64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  done_ = done;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (seconds < 0.5 || now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  const double rate = double(done) / scale_ / seconds;
  const int percent = total > 0 ? int(100.0 * double(done) / double(total)) : 0;
  std::fprintf(stderr, "\r\x1b[K%s: %s / %s %s, %d%% (%s %s/s)", label_.c_str(),
               amount(double(done), scale_).c_str(), amount(double(total), scale_).c_str(),
               unit_.c_str(), percent, amount(rate * scale_, scale_).c_str(), unit_.c_str());
  std::fflush(stderr);
}

void ProgressLine::erase(bool summary) {
  if (!drawn_) return;
  drawn_ = false;
  std::fprintf(stderr, "\r\x1b[K");
  if (summary) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = double(done_) / seconds;
    std::fprintf(stderr, "%s: %s %s in %.1f s (%s %s/s)\n", label_.c_str(),
                 amount(double(done_), scale_).c_str(), unit_.c_str(), seconds,
                 amount(rate, scale_).c_str(), unit_.c_str());
  }
  std::fflush(stderr);
}

}  // namespace hearth::cli
