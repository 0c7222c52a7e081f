#include "cli/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>
#include <utf8proc.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#ifdef HEARTH_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace hearth::cli {

namespace {

winsize window_size() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0) ws = {};
  return ws;
}

}  // namespace

bool stdin_is_terminal() { return isatty(STDIN_FILENO) != 0; }
bool stdout_is_terminal() { return isatty(STDOUT_FILENO) != 0; }

int terminal_columns() {
  const int c = window_size().ws_col;
  return c > 0 ? c : 80;
}

int terminal_rows() {
  const int r = window_size().ws_row;
  return r > 0 ? r : 24;
}

LineReader::LineReader() {
#ifdef HEARTH_HAVE_LIBEDIT
  editing_ = stdin_is_terminal() && stdout_is_terminal();
#else
  editing_ = false;
#endif
}

LineReader::~LineReader() = default;

std::optional<std::string> LineReader::read(const char* prompt) {
#ifdef HEARTH_HAVE_LIBEDIT
  if (editing_) {
    char* line = readline(prompt);
    if (!line) return std::nullopt;
    std::string out(line);
    std::free(line);
    return out;
  }
#endif
  if (stdin_is_terminal()) {
    std::fputs(prompt, stdout);
    std::fflush(stdout);
  }
  std::string line;
  if (!std::getline(std::cin, line)) return std::nullopt;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

void LineReader::remember(const std::string& entry) {
#ifdef HEARTH_HAVE_LIBEDIT
  if (editing_ && !entry.empty()) add_history(entry.c_str());
#else
  (void)entry;
#endif
}

void ErasableText::write(std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  // Count the rows the text takes on screen. A terminal wraps before a character that no longer
  // fits (so a line filled exactly to the edge takes no extra row until more follows).
  partial_.append(text);
  size_t i = 0;
  while (i < partial_.size()) {
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(partial_.data() + i),
                                    utf8proc_ssize_t(partial_.size() - i), &cp);
    if (n < 0) {
      // Incomplete at the end: keep it for the next write; invalid elsewhere: one cell.
      if (partial_.size() - i < 4) break;
      cp = '?';
      i += 1;
    } else {
      i += size_t(n);
    }
    if (cp == '\n') {
      ++rows_;
      column_ = 0;
      continue;
    }
    const int width = cp == '\t' ? 8 - column_ % 8 : utf8proc_charwidth(cp);
    if (width <= 0) continue;
    if (column_ + width > columns_) {
      ++rows_;
      column_ = 0;
    }
    column_ += width;
  }
  partial_.erase(0, i);
}

void ErasableText::erase() {
  std::printf("\r");
  if (rows_ > 0) std::printf("\x1b[%dA", rows_);
  std::printf("\x1b[J");
  std::fflush(stdout);
  rows_ = 0;
  column_ = 0;
  partial_.clear();
}

}  // namespace hearth::cli
