#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hearth {

namespace {
LogLevel initial_level() {
  const char* env = std::getenv("HEARTH_LOG");
  if (!env) return LogLevel::Warn;
  if (!std::strcmp(env, "error")) return LogLevel::Error;
  if (!std::strcmp(env, "info")) return LogLevel::Info;
  if (!std::strcmp(env, "debug")) return LogLevel::Debug;
  return LogLevel::Warn;
}
std::atomic<LogLevel> g_level{initial_level()};
}  // namespace

LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { g_level = level; }

void log_write(LogLevel level, const std::string& message) {
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "hearth %s: %s\n", names[int(level)], message.c_str());
}

}  // namespace hearth
