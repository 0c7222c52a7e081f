// Runs a shell command the way a user's shell would (the tests of the hearth binary): its exit
// status and what it printed on stdout (add 2>&1 to the command for stderr too).
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace hearth::test {

struct CommandResult {
  int status;       // the exit status; -1 when killed by a signal
  std::string out;  // stdout
};

inline CommandResult run_command(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return {-1, "popen failed: " + command};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace hearth::test
