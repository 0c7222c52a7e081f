#include "hub/net/pull_progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hub/hf_cache.h"

namespace hearth::hub {

namespace {
constexpr auto kRedrawEvery = std::chrono::milliseconds(100);
constexpr auto kSpeedWindow = std::chrono::seconds(5);
constexpr int kBarWidth = 24;
}  // namespace

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long t = long(seconds + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

PullProgress::PullProgress(uint64_t total_bytes, size_t n_files, bool terminal, std::FILE* out)
    : total_(total_bytes), n_files_(n_files), terminal_(terminal), out_(out) {}

double PullProgress::speed(Clock::time_point now) const {
  if (samples_.size() < 2) return 0;
  const double dt = std::chrono::duration<double>(now - samples_.front().first).count();
  return dt > 0.2 ? double(samples_.back().second - samples_.front().second) / dt : 0;
}

std::string PullProgress::status_line(Clock::time_point now) {
  const uint64_t done = uint64_t(std::max<int64_t>(on_disk_, 0));
  const double frac = total_ ? std::min(1.0, double(done) / double(total_)) : 1.0;
  const double rate = speed(now);
  const double eta = rate > 0 ? double(total_ - std::min(done, total_)) / rate : NAN;
  return fmt::format("{:3.0f}%  {} / {}  {:.1f} MB/s  ETA {}  ({}/{} files)", 100 * frac,
                     format_bytes(done), format_bytes(total_), rate / 1e6, format_eta(eta),
                     files_done_, n_files_);
}

void PullProgress::draw(bool force) {
  const auto now = Clock::now();
  if (!force && now - last_draw_ < kRedrawEvery) return;
  last_draw_ = now;
  const std::string status = status_line(now);
  if (terminal_) {
    const double frac =
        total_ ? std::min(1.0, double(std::max<int64_t>(on_disk_, 0)) / double(total_)) : 1.0;
    const int filled = int(frac * kBarWidth);
    std::string bar =
        std::string(size_t(filled), '#') + std::string(size_t(kBarWidth - filled), '.');
    std::fprintf(out_, "\r[%s] %s\x1b[K", bar.c_str(), status.c_str());
  } else {
    const int tenth =
        total_ ? int(10 * double(std::max<int64_t>(on_disk_, 0)) / double(total_)) : 10;
    if (tenth <= last_tenth_ && !force) return;
    last_tenth_ = std::max(last_tenth_, tenth);
    if (!force) std::fprintf(out_, "pull: %s\n", status.c_str());
  }
  std::fflush(out_);
}

void PullProgress::bytes(int64_t on_disk, uint64_t network) {
  std::lock_guard<std::mutex> lock(mu_);
  on_disk_ += on_disk;
  network_ += network;
  const auto now = Clock::now();
  if (network > 0) {
    samples_.emplace_back(now, network_);
    while (samples_.size() > 2 && now - samples_.front().first > kSpeedWindow) samples_.pop_front();
  }
  draw(false);
}

void PullProgress::file_done(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  ++files_done_;
  if (terminal_) {
    draw(true);
  } else {
    std::fprintf(out_, "pull: fetched %s (%s)\n", path.c_str(), format_bytes(size).c_str());
    std::fflush(out_);
  }
}

void PullProgress::note(const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (terminal_) std::fprintf(out_, "\r\x1b[K");
  std::fprintf(out_, "pull: %s\n", line.c_str());
  if (terminal_) draw(true);
  std::fflush(out_);
}

void PullProgress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (finished_) return;
  finished_ = true;
  if (terminal_) {
    draw(true);
    std::fputc('\n', out_);
  }
  std::fflush(out_);
}

}  // namespace hearth::hub
