#include "core/memory_limit.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace hearth {

namespace {

// MemAvailable from /proc/meminfo, in bytes (0 when absent).
size_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return size_t(kib) * 1024;
  }
  return 0;
}

// A single number from a cgroup file; false when unreadable or "max" (no limit).
bool read_number(const char* path, uint64_t& value) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return false;
  std::istringstream parse(text);
  return bool(parse >> value);
}

}  // namespace

size_t available_memory_bytes() {
  size_t available = mem_available();
  uint64_t limit = 0, used = 0;
  // cgroup v2, then v1 (whose "no limit" is a huge number, harmless under the min).
  if ((read_number("/sys/fs/cgroup/memory.max", limit) &&
       read_number("/sys/fs/cgroup/memory.current", used)) ||
      (read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", limit) &&
       read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes", used))) {
    const size_t room = limit > used ? size_t(limit - used) : 0;
    available = available > 0 ? std::min(available, room) : room;
  }
  return available;
}

}  // namespace hearth
