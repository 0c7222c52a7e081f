#include "core/cpu_limit.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace hearth {

namespace {

std::string_view trim(std::string_view s) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::optional<long long> parse_integer(std::string_view s) {
  s = trim(s);
  long long value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

// Files under /proc and /sys report no size, so read until the end (they are small).
std::optional<std::string> read_small_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

// min over positive limits; 0 stands for "none".
int tighter(int a, int b) {
  if (a <= 0) return b;
  if (b <= 0) return a;
  return std::min(a, b);
}

// Walks from base/path up to base, combining the limit `read_level` finds at each level: a
// quota on an ancestor caps every cgroup below it.
template <typename ReadLevel>
int limit_along(const std::filesystem::path& base, std::string_view path, ReadLevel read_level) {
  std::filesystem::path rel(std::string(trim(path)));
  rel = rel.relative_path();
  int limit = 0;
  while (true) {
    limit = tighter(limit, read_level(base / rel));
    if (rel.empty()) break;
    rel = rel.parent_path();
  }
  return limit;
}

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

int cgroup_cpu_limit_from(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  const long long cpus = quota / period + (quota % period != 0);
  return int(std::clamp<long long>(cpus, 1, 1 << 20));
}

int cgroup_cpu_limit_v2(std::string_view cpu_max) {
  cpu_max = trim(cpu_max);
  const size_t space = cpu_max.find_first_of(" \t");
  const std::string_view max = cpu_max.substr(0, space);
  if (max == "max") return 0;
  const auto quota = parse_integer(max);
  long long period = 100000;  // the kernel's default when only the quota was written
  if (space != std::string_view::npos) {
    const auto p = parse_integer(cpu_max.substr(space));
    if (!p) return 0;
    period = *p;
  }
  return quota ? cgroup_cpu_limit_from(*quota, period) : 0;
}

int cgroup_cpu_limit_v1(std::string_view quota_us, std::string_view period_us) {
  const auto quota = parse_integer(quota_us), period = parse_integer(period_us);
  return quota && period ? cgroup_cpu_limit_from(*quota, *period) : 0;
}

int cgroup_cpu_limit(std::string_view proc_self_cgroup, const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path v2_base;
  if (fs::exists(root / "cgroup.controllers", ec)) {
    v2_base = root;
  } else if (fs::exists(root / "unified" / "cgroup.controllers", ec)) {
    v2_base = root / "unified";
  }
  fs::path v1_base;
  for (const char* name : {"cpu,cpuacct", "cpuacct,cpu", "cpu"}) {
    if (fs::exists(root / name / "cpu.cfs_quota_us", ec)) {
      v1_base = root / name;
      break;
    }
  }

  int limit = 0;
  std::istringstream lines{std::string(proc_self_cgroup)};
  for (std::string line; std::getline(lines, line);) {
    // "hierarchy-id:controller,list:/path"; the v2 hierarchy is "0::/path".
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string_view view(line);
    const std::string_view id = view.substr(0, a), controllers = view.substr(a + 1, b - a - 1);
    const std::string_view path = view.substr(b + 1);
    if (id == "0" && controllers.empty()) {
      if (v2_base.empty()) continue;
      limit = tighter(limit, limit_along(v2_base, path, [](const fs::path& dir) {
                        const auto text = read_small_file(dir / "cpu.max");
                        return text ? cgroup_cpu_limit_v2(*text) : 0;
                      }));
      continue;
    }
    bool has_cpu = false;
    for (size_t at = 0; at <= controllers.size();) {
      size_t comma = controllers.find(',', at);
      if (comma == std::string_view::npos) comma = controllers.size();
      has_cpu |= controllers.substr(at, comma - at) == "cpu";
      at = comma + 1;
    }
    if (!has_cpu || v1_base.empty()) continue;
    limit = tighter(limit, limit_along(v1_base, path, [](const fs::path& dir) {
                      const auto quota = read_small_file(dir / "cpu.cfs_quota_us");
                      const auto period = read_small_file(dir / "cpu.cfs_period_us");
                      return quota && period ? cgroup_cpu_limit_v1(*quota, *period) : 0;
                    }));
  }
  return limit;
}

int available_cores() {
  int cores = affinity_cores();
  if (const auto text = read_small_file("/proc/self/cgroup"))
    cores = tighter(cores, cgroup_cpu_limit(*text, "/sys/fs/cgroup"));
  return std::max(1, cores);
}

}  // namespace hearth
