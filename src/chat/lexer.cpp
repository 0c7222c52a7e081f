// Jinja2's lexer, rule for rule (jinja2/lexer.py, 3.1) with trim_blocks and lstrip_blocks on:
// a tag start ends the data before it; `{%-`/`{{-`/`{#-` rstrip that data, `{%+` keeps it, and
// otherwise lstrip_blocks drops spaces/tabs before `{%`/`{#` when only they sit between the line
// start and the tag. `line_starting` mirrors jinja2's flag: did the previous match end in "\n".
#include "chat/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "chat/pystr.h"
#include "chat/template.h"

namespace hearth::chat {
namespace {

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // Newlines normalised to \n; one trailing newline dropped (keep_trailing_newline=False).
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_.push_back(source[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    const size_t n = src_.size();
    while (pos_ < n) {
      size_t p = find_tag_start(pos_);
      if (p == std::string::npos) {
        emit(TokenType::Data, pos_, src_.substr(pos_));
        break;
      }
      char kind = src_[p + 1];
      size_t q = p + 2;
      char sign = (q < n && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : 0;
      size_t raw_body = kind == '%' ? match_raw_begin(q + (sign ? 1 : 0)) : std::string::npos;
      std::string text = src_.substr(pos_, p - pos_);
      strip_before_tag(text, sign, kind == '{');
      if (!text.empty()) emit(TokenType::Data, pos_, std::move(text));
      if (raw_body != std::string::npos) {
        line_starting_ = src_[raw_body - 1] == '\n';
        lex_raw(p, raw_body);
      } else if (kind == '#') {
        lex_comment(p, q + (sign ? 1 : 0));
      } else {
        emit(kind == '{' ? TokenType::VarBegin : TokenType::BlockBegin, p,
             kind == '{' ? "{{" : "{%");
        pos_ = q + (sign ? 1 : 0);
        lex_tag(kind == '%', p);
      }
    }
    Token eof{TokenType::Eof, "", 0, 0, 0, 0};
    set_location(eof, src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(size_t p, const std::string& what) {
    Token t;
    set_location(t, p);
    throw TemplateError(
        fmt::format("chat template: line {}, column {}: {}", t.line, t.column, what));
  }

  void set_location(Token& t, size_t p) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), p);
    t.line = static_cast<int>(it - line_starts_.begin());
    t.column = static_cast<int>(p - line_starts_[static_cast<size_t>(t.line - 1)]) + 1;
  }

  void emit(TokenType type, size_t p, std::string text) {
    Token t{type, std::move(text), 0, 0, 0, 0};
    set_location(t, p);
    tokens_.push_back(std::move(t));
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  size_t skip_space(size_t i) const {
    while (i < src_.size()) {
      size_t j = i;
      if (!py_isspace(utf8_next(src_, j))) break;
      i = j;
    }
    return i;
  }

  bool at(size_t i, std::string_view s) const { return src_.compare(i, s.size(), s) == 0; }

  // `-` strips all whitespace before the tag; otherwise lstrip_blocks applies to {% and {#.
  void strip_before_tag(std::string& text, char sign, bool is_variable) const {
    if (sign == '-') {
      std::u32string u = utf8_decode(text);
      size_t e = u.size();
      while (e > 0 && py_isspace(u[e - 1])) --e;
      text = utf8_encode(std::u32string_view(u).substr(0, e));
    } else if (sign != '+' && !is_variable) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) &&
          text.find_first_not_of(" \t", l_pos) == std::string::npos) {
        text.resize(l_pos);
      }
    }
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})`: returns the offset after the match, or npos.
  size_t match_raw_begin(size_t i) const {
    i = skip_space(i);
    if (!at(i, "raw")) return std::string::npos;
    i = skip_space(i + 3);
    if (at(i, "-%}")) return skip_space(i + 3);
    if (at(i, "%}")) return i + 2;
    return std::string::npos;
  }

  // Finds `{%[-+]?\s*endraw\s*(\+%}|-%}\s*|%}\n?)`; the body before it follows the data rules.
  void lex_raw(size_t begin, size_t body) {
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) ? src_[j] : 0;
      j = skip_space(j + (sign ? 1 : 0));
      if (!at(j, "endraw")) continue;
      j = skip_space(j + 6);
      size_t end;
      if (at(j, "+%}")) {
        end = j + 3;
      } else if (at(j, "-%}")) {
        end = skip_space(j + 3);
      } else if (at(j, "%}")) {
        end = j + 2 + ((j + 2 < src_.size() && src_[j + 2] == '\n') ? 1 : 0);
      } else {
        continue;
      }
      std::string text = src_.substr(body, i - body);
      strip_before_tag(text, sign, false);
      if (!text.empty()) emit(TokenType::Data, body, std::move(text));
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return;
    }
    error(begin, "Missing end of raw directive");
  }

  void lex_comment(size_t begin, size_t i) {
    for (; i < src_.size(); ++i) {
      size_t end = 0;
      if (at(i, "+#}")) {
        end = i + 3;
      } else if (at(i, "-#}")) {
        end = skip_space(i + 3);
      } else if (at(i, "#}")) {
        end = i + 2 + ((i + 2 < src_.size() && src_[i + 2] == '\n') ? 1 : 0);
      } else {
        continue;
      }
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return;
    }
    error(begin, "Missing end of comment tag");
  }

  size_t scan_digits(size_t i) const {  // \d+(_\d+)*
    size_t n = src_.size();
    if (i >= n || !isdigit(static_cast<unsigned char>(src_[i]))) return std::string::npos;
    while (i < n && isdigit(static_cast<unsigned char>(src_[i]))) ++i;
    while (i + 1 < n && src_[i] == '_' && isdigit(static_cast<unsigned char>(src_[i + 1]))) {
      ++i;
      while (i < n && isdigit(static_cast<unsigned char>(src_[i]))) ++i;
    }
    return i;
  }

  void lex_number() {
    size_t start = pos_;
    auto strip = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    if (start == 0 || src_[start - 1] != '.') {  // floats never follow a dot (foo.0.1)
      size_t k = scan_digits(start);
      bool is_float = false;
      if (k < src_.size() && src_[k] == '.') {
        size_t f = scan_digits(k + 1);
        if (f != std::string::npos) {
          k = f;
          is_float = true;
        }
      }
      if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
        size_t m = k + 1;
        if (m < src_.size() && (src_[m] == '+' || src_[m] == '-')) ++m;
        size_t e = scan_digits(m);
        if (e != std::string::npos) {
          k = e;
          is_float = true;
        }
      }
      if (is_float) {
        Token t{TokenType::Float, src_.substr(start, k - start), 0, 0, 0, 0};
        t.float_value = std::strtod(strip(t.text).c_str(), nullptr);
        set_location(t, start);
        tokens_.push_back(std::move(t));
        pos_ = k;
        return;
      }
    }
    int base = 10;
    size_t i = start;
    char p1 = i + 1 < src_.size() ? static_cast<char>(tolower(src_[i + 1])) : 0;
    auto is_base_digit = [&](char c, int b) {
      c = static_cast<char>(tolower(c));
      return b == 2   ? (c == '0' || c == '1')
             : b == 8 ? (c >= '0' && c <= '7')
                      : (isxdigit(static_cast<unsigned char>(c)) != 0);
    };
    size_t digits_from = i;
    if (src_[i] == '0' && (p1 == 'x' || p1 == 'o' || p1 == 'b')) {
      base = p1 == 'x' ? 16 : p1 == 'o' ? 8 : 2;
      size_t j = i + 2;
      size_t end = j;
      while (true) {  // (_?digit)+
        size_t k = end;
        if (k < src_.size() && src_[k] == '_') ++k;
        if (k < src_.size() && is_base_digit(src_[k], base)) {
          end = k + 1;
        } else {
          break;
        }
      }
      if (end == j)
        base = 10;  // "0x" without digits lexes as 0 then a name
      else {
        digits_from = j;
        i = end;
      }
    }
    if (base == 10) {
      i = start;
      if (src_[i] == '0') {  // 0(_?0)*
        ++i;
        while (true) {
          size_t k = i;
          if (k < src_.size() && src_[k] == '_') ++k;
          if (k < src_.size() && src_[k] == '0')
            i = k + 1;
          else
            break;
        }
      } else {
        i = scan_digits(i);
      }
      digits_from = start;
    }
    Token t{TokenType::Int, src_.substr(start, i - start), 0, 0, 0, 0};
    std::string digits = strip(src_.substr(digits_from, i - digits_from));
    errno = 0;
    t.int_value = std::strtoll(digits.c_str(), nullptr, base);
    if (errno == ERANGE) error(start, "integer literal too large");
    set_location(t, start);
    tokens_.push_back(std::move(t));
    pos_ = i;
  }

  void lex_string() {
    char quote = src_[pos_];
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) error(pos_, fmt::format("unexpected char \"{}\" at {}", quote, pos_));
    Token t{TokenType::String, "", 0, 0, 0, 0};
    set_location(t, pos_);
    if (auto err = py_unescape(std::string_view(src_).substr(pos_ + 1, i - pos_ - 1), t.text))
      error(pos_, *err);
    tokens_.push_back(std::move(t));
    pos_ = i + 1;
  }

  // Inside {{ }} or {% %}: the end rule first (unless brackets are open), then tag rules.
  void lex_tag(bool block, size_t begin) {
    std::vector<char> balance;
    const size_t n = src_.size();
    while (pos_ < n) {
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          if (at(pos_, "+%}"))
            end = pos_ + 3;
          else if (at(pos_, "-%}"))
            end = skip_space(pos_ + 3);
          else if (at(pos_, "%}"))
            end = pos_ + 2 + ((pos_ + 2 < n && src_[pos_ + 2] == '\n') ? 1 : 0);
        } else {
          if (at(pos_, "-}}"))
            end = skip_space(pos_ + 3);
          else if (at(pos_, "}}"))
            end = pos_ + 2;
        }
        if (end) {
          emit(block ? TokenType::BlockEnd : TokenType::VarEnd, pos_, block ? "%}" : "}}");
          pos_ = end;
          line_starting_ = src_[end - 1] == '\n';
          return;
        }
      }
      unsigned char c = static_cast<unsigned char>(src_[pos_]);
      size_t j = pos_;
      if (py_isspace(utf8_next(src_, j))) {
        pos_ = skip_space(pos_);
      } else if (isdigit(c)) {
        lex_number();
      } else if (isalpha(c) || c == '_') {
        size_t e = pos_;
        while (e < n && (isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        emit(TokenType::Name, pos_, src_.substr(pos_, e - pos_));
        pos_ = e;
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : two) {
          if (at(pos_, t)) op = t;
        }
        if (op.empty() && std::string_view("+-/*%~[](){}><=.:|,;").find(static_cast<char>(c)) !=
                              std::string_view::npos) {
          op = std::string(1, static_cast<char>(c));
        }
        if (op.empty())
          error(pos_, fmt::format("unexpected char '{}' at {}",
                                  std::string(1, static_cast<char>(c)), pos_));
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) error(pos_, fmt::format("unexpected '{}'", op));
          if (balance.back() != op[0])
            error(pos_, fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
          balance.pop_back();
        }
        emit(TokenType::Op, pos_, op);
        pos_ += op.size();
      }
    }
    (void)begin;  // unterminated tags end at Eof; the parser reports what it expected
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe_token(const Token& t) {
  switch (t.type) {
    case TokenType::Eof:
      return "end of template";
    case TokenType::VarBegin:
      return "begin of print statement";
    case TokenType::VarEnd:
      return "end of print statement";
    case TokenType::BlockBegin:
      return "begin of statement block";
    case TokenType::BlockEnd:
      return "end of statement block";
    case TokenType::Data:
      return "template data";
    case TokenType::String:
      return "string";
    case TokenType::Int:
      return "integer";
    case TokenType::Float:
      return "float";
    default:
      return t.text;
  }
}

}  // namespace hearth::chat
