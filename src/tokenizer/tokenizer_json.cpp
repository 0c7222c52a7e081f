// The tokenizer.json parser. Strings are scanned in runs up to the next quote, backslash or
// control byte and must be valid UTF-8; \u escapes (with surrogate pairs) become UTF-8. Nesting
// is limited to 256 levels so hostile input cannot exhaust the stack.
#include "tokenizer/tokenizer_json.h"

#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

namespace {
using json = nlohmann::json;

class Parser {
 public:
  Parser(std::string_view text, TokenizerJson& out, std::string file)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        out_(out),
        file_(std::move(file)) {}

  void parse_document() {
    skip_ws();
    parse_value(out_.doc, 0, Where::Root);
    skip_ws();
    if (p_ != end_) error("unexpected data after the top-level value");
  }

 private:
  enum class Where { Root, Model, Other };

  [[noreturn]] void error(const char* what) const {
    fail("{}: invalid JSON at byte {}: {}", file_, static_cast<size_t>(p_ - begin_), what);
  }
  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  void expect(char c, const char* what) {
    skip_ws();
    if (p_ >= end_ || *p_ != c) error(what);
    ++p_;
  }
  bool literal(const char* word, size_t n) {
    if (static_cast<size_t>(end_ - p_) < n || std::string_view(p_, n) != std::string_view(word, n))
      return false;
    p_ += n;
    return true;
  }

  unsigned hex4() {
    if (end_ - p_ < 4) error("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = *p_++;
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else
        error("bad \\u escape");
    }
    return v;
  }

  // At the opening quote.
  void parse_string(std::string& s) {
    s.clear();
    ++p_;
    for (;;) {
      const char* run = p_;
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20)
        ++p_;
      // JSON text is UTF-8 (as HF's serde reader requires); a run ends at an ASCII byte, so no
      // sequence spans two runs. Invalid bytes would make every later dump() of the value throw.
      const std::string_view text(run, static_cast<size_t>(p_ - run));
      if (const size_t valid = utf8_valid_prefix(text); valid != text.size()) {
        p_ = run + valid;
        error("invalid UTF-8 in string");
      }
      s.append(text);
      if (p_ >= end_) error("unterminated string");
      char c = *p_++;
      if (c == '"') return;
      if (c != '\\') {
        --p_;
        error("control character in string");
      }
      if (p_ >= end_) error("unterminated string");
      char e = *p_++;
      switch (e) {
        case '"':
          s += '"';
          break;
        case '\\':
          s += '\\';
          break;
        case '/':
          s += '/';
          break;
        case 'b':
          s += '\b';
          break;
        case 'f':
          s += '\f';
          break;
        case 'n':
          s += '\n';
          break;
        case 'r':
          s += '\r';
          break;
        case 't':
          s += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u')
              error("lone surrogate in \\u escape");
            p_ += 2;
            unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) error("lone surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            error("lone surrogate in \\u escape");
          }
          utf8_append(s, static_cast<char32_t>(cp));
          break;
        }
        default:
          error("bad escape in string");
      }
    }
  }

  void parse_number(json& dst) {
    const char* start = p_;
    bool is_float = false;
    if (p_ < end_ && *p_ == '-') ++p_;
    while (p_ < end_ && ((*p_ >= '0' && *p_ <= '9') || *p_ == '.' || *p_ == 'e' || *p_ == 'E' ||
                         *p_ == '+' || *p_ == '-')) {
      if (*p_ == '.' || *p_ == 'e' || *p_ == 'E') is_float = true;
      ++p_;
    }
    if (!is_float) {
      int64_t v = 0;
      auto r = std::from_chars(start, p_, v);
      if (r.ec == std::errc() && r.ptr == p_) {
        dst = v;
        return;
      }
      uint64_t u = 0;
      auto ru = std::from_chars(start, p_, u);
      if (ru.ec == std::errc() && ru.ptr == p_) {
        dst = u;
        return;
      }
    }
    std::string tmp(start, p_);
    char* stop = nullptr;
    double d = std::strtod(tmp.c_str(), &stop);
    if (tmp.empty() || stop != tmp.c_str() + tmp.size()) {
      p_ = start;
      error("bad number");
    }
    dst = d;
  }

  // The items of the object or array whose opening bracket is at the cursor, up to the matching
  // `close`: item() reads each, the commas between them are checked here.
  template <typename Item>
  void each_item(char close, const char* close_error, Item&& item) {
    ++p_;
    skip_ws();
    if (p_ < end_ && *p_ == close) {
      ++p_;
      return;
    }
    for (;;) {
      item();
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      expect(close, close_error);
      return;
    }
  }

  // The members of the object whose '{' is at the cursor: member(key) runs with the cursor on
  // each value (it may take the key's string).
  template <typename Member>
  void each_member(const char* key_error, const char* close_error, Member&& member) {
    std::string key;
    each_item('}', close_error, [&] {
      skip_ws();
      if (p_ >= end_ || *p_ != '"') error(key_error);
      parse_string(key);
      expect(':', "expected ':'");
      skip_ws();
      member(key);
    });
  }

  void parse_value(json& dst, int depth, Where where) {
    if (depth > 256) error("nesting too deep");
    skip_ws();
    if (p_ >= end_) error("unexpected end of input");
    char c = *p_;
    if (c == '{') {
      dst = json::object();
      return each_member("expected a string key", "expected ',' or '}'", [&](std::string& key) {
        if (where == Where::Model && key == "vocab" && p_ < end_ && *p_ == '{') {
          parse_vocab();
        } else if (where == Where::Model && key == "merges" && p_ < end_ && *p_ == '[') {
          parse_merges();
        } else {
          Where child = where == Where::Root && key == "model" ? Where::Model : Where::Other;
          parse_value(dst[key], depth + 1, child);
        }
      });
    }
    if (c == '[') {
      dst = json::array();
      return each_item(']', "expected ',' or ']'", [&] {
        dst.push_back(json());
        parse_value(dst.back(), depth + 1, Where::Other);
      });
    }
    if (c == '"') {
      std::string s;
      parse_string(s);
      dst = std::move(s);
      return;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(dst);
    if (literal("true", 4)) {
      dst = true;
      return;
    }
    if (literal("false", 5)) {
      dst = false;
      return;
    }
    if (literal("null", 4)) {
      dst = nullptr;
      return;
    }
    error("unexpected character");
  }

  void parse_vocab() {
    out_.has_vocab = true;
    each_member("expected a string key in model.vocab", "expected ',' or '}' in model.vocab",
                [&](std::string& key) {
                  int64_t id = -1;
                  auto r = std::from_chars(p_, end_, id);
                  if (r.ec != std::errc() ||
                      (r.ptr < end_ && (*r.ptr == '.' || *r.ptr == 'e' || *r.ptr == 'E')))
                    fail("{}: model.vocab[{:?}]: expected an integer id", file_, key);
                  if (id < 0 || id > INT32_MAX)
                    fail("{}: model.vocab[{:?}]: id {} out of range", file_, key, id);
                  p_ = r.ptr;
                  out_.vocab.emplace_back(std::move(key), static_cast<int32_t>(id));
                  key = std::string();
                });
  }

  void parse_merges() {
    out_.has_merges = true;
    std::string s;
    each_item(']', "expected ',' or ']' in model.merges", [&] {
      skip_ws();
      size_t index = out_.merges.size();
      if (p_ < end_ && *p_ == '"') {
        parse_string(s);
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail("{}: model.merges[{}]: expected two tokens separated by one space, got {:?}", file_,
               index, s);
        out_.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (p_ < end_ && *p_ == '[') {
        ++p_;
        std::pair<std::string, std::string> pair;
        for (int k = 0; k < 2; ++k) {
          skip_ws();
          if (p_ >= end_ || *p_ != '"')
            fail("{}: model.merges[{}]: expected two tokens", file_, index);
          parse_string(k == 0 ? pair.first : pair.second);
          skip_ws();
          if (k == 0) {
            if (p_ >= end_ || *p_ != ',')
              fail("{}: model.merges[{}]: expected two tokens", file_, index);
            ++p_;
          }
        }
        if (p_ >= end_ || *p_ != ']')
          fail("{}: model.merges[{}]: expected two tokens", file_, index);
        ++p_;
        out_.merges.push_back(std::move(pair));
      } else {
        fail("{}: model.merges[{}]: expected two tokens", file_, index);
      }
    });
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  TokenizerJson& out_;
  std::string file_;
};
}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& file) {
  TokenizerJson out;
  out.vocab.reserve(text.size() / 40);
  out.merges.reserve(text.size() / 40);
  Parser(text, out, file).parse_document();
  if (!out.doc.is_object()) fail("{}: expected a JSON object at the top level", file);
  return out;
}

}  // namespace hearth::tok
