// Tokenizer for Jinja2 template source, configured as transformers configures Jinja2:
// trim_blocks (drop the newline after a block or comment tag), lstrip_blocks (drop spaces and
// tabs before a block or comment tag at the start of a line), `-`/`+` whitespace control,
// newlines normalised to \n and one trailing newline dropped (keep_trailing_newline=False).
// Invariant: the token stream ends with exactly one Eof token; errors carry line and column.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::chat {

enum class TokenType : uint8_t {
  Data,        // literal template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,
  Int,
  Float,
  Op,  // operator or punctuation; text in `text`
  Eof,
};

struct Token {
  TokenType type;
  std::string text;  // Data text, name, decoded string, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Throws TemplateError ("chat template: line L, column C: ...") on malformed source.
std::vector<Token> tokenize(std::string_view source);

// Human-readable description of a token for syntax errors ("end of print statement", "'x'").
std::string describe_token(const Token& t);

}  // namespace hearth::chat
