// What `hearth chat` needs of the terminal: reading a line with editing and history (libedit's
// readline when hearth is built with it and stdin is a terminal; plain lines otherwise, so piped
// input works), the terminal's size, dim text, and text printed so that it can be taken back
// (the thinking a reply folds away once its answer begins).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace hearth::cli {

bool stdin_is_terminal();
bool stdout_is_terminal();
int terminal_columns();  // 80 when unknown
int terminal_rows();     // 24 when unknown

inline constexpr const char* kDim = "\x1b[2m";
inline constexpr const char* kReset = "\x1b[0m";

class LineReader {
 public:
  LineReader();
  ~LineReader();
  // One line without its newline; nullopt at the end of input (Ctrl-D).
  std::optional<std::string> read(const char* prompt);
  void remember(const std::string& entry);  // into the history, for the up arrow

 private:
  bool editing_;
};

// Text written to stdout while counting the terminal rows it covers (wide characters and line
// wrapping included), so that it can be erased while it is still on the screen.
class ErasableText {
 public:
  void write(std::string_view text);
  int rows() const { return rows_ + 1; }
  // Whether erase() can take it all back: it has not scrolled past the top of the screen.
  bool fits_on_screen() const { return rows() < terminal_rows(); }
  // Moves to where the text began and clears from there to the end of the screen.
  void erase();

 private:
  int columns_ = terminal_columns();
  int column_ = 0;
  int rows_ = 0;         // line breaks so far, explicit or by wrapping
  std::string partial_;  // an incomplete UTF-8 sequence from the last write
};

}  // namespace hearth::cli
