// Python str semantics over UTF-8 (see pystr.h). Invalid UTF-8 bytes round-trip through the
// surrogate-escape range U+DC80..U+DCFF, as Python's surrogateescape does, so no byte is lost.
#include "chat/pystr.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tokenizer/unicode.h"

namespace hearth::chat {

char32_t utf8_next(std::string_view s, size_t& i) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = b0 >= 0xF0 && b0 < 0xF5 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 && b0 < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > s.size()) {
    ++i;
    return 0xDC00 + b0;
  }
  char32_t cp = b0 & (0x7F >> n);
  for (int k = 1; k < n; ++k) {
    auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xDC00 + b0;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong and surrogate encodings are invalid: escape the lead byte.
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp < 0xE000))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
    ++i;
    return 0xDC00 + b0;
  }
  i += n;
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp >= 0xDC80 && cp <= 0xDCFF)  // an escaped invalid byte goes back out as itself
    out.push_back(static_cast<char>(cp - 0xDC00));
  else
    tok::utf8_append(out, cp);
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(utf8_next(s, i));
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) utf8_append(out, cp);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    utf8_next(s, i);
    ++n;
  }
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

static utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool py_isalpha(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
}
bool py_isdigit(char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; }
bool py_isalnum(char32_t c) {
  auto k = category(c);
  return py_isalpha(c) || k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL ||
         k == UTF8PROC_CATEGORY_NO;
}
bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  auto k = category(c);
  return !(k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
           k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN || k == UTF8PROC_CATEGORY_ZL ||
           k == UTF8PROC_CATEGORY_ZP || k == UTF8PROC_CATEGORY_ZS);
}
bool py_islower_cp(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LL; }
bool py_isupper_cp(char32_t c) {
  return category(c) == UTF8PROC_CATEGORY_LU || category(c) == UTF8PROC_CATEGORY_LT;
}
static bool is_cased(char32_t c) {
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

static char32_t to_upper(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<int32_t>(c)));
}
static char32_t to_lower(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<int32_t>(c)));
}
static char32_t to_title(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<int32_t>(c)));
}

// Python's full case mapping differs from the simple one for a few letters; ß is the common one.
static void append_upper(std::string& out, char32_t c) {
  if (c == 0xDF) {
    out += "SS";
  } else {
    utf8_append(out, to_upper(c));
  }
}

std::string py_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) append_upper(out, utf8_next(s, i));
  return out;
}

std::string py_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) utf8_append(out, to_lower(utf8_next(s, i)));
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    utf8_append(out, first ? to_title(c) : to_lower(c));
    first = false;
  }
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    utf8_append(out, prev_cased ? to_lower(c) : to_title(c));
    prev_cased = is_cased(c);
  }
  return out;
}

std::string py_swapcase(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    if (py_isupper_cp(c)) {
      utf8_append(out, to_lower(c));
    } else if (py_islower_cp(c)) {
      append_upper(out, c);
    } else {
      utf8_append(out, c);
    }
  }
  return out;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  std::u32string u = utf8_decode(s);
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit != 0) {
      size_t f = s.find(*sep, pos);
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, f - pos));
      pos = f + sep->size();
      if (maxsplit > 0) --maxsplit;
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = utf8_decode(s);
  size_t i = 0, n = u.size();
  while (maxsplit != 0) {
    while (i < n && py_isspace(u[i])) ++i;
    if (i == n) break;
    size_t j = i;
    while (j < n && !py_isspace(u[j])) ++j;
    out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
    if (maxsplit > 0) --maxsplit;
  }
  while (i < n && py_isspace(u[i])) ++i;
  if (i < n) out.push_back(utf8_encode(std::u32string_view(u).substr(i)));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (maxsplit != 0) {
      if (end < sep->size()) break;
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string_view::npos) break;
      out.emplace_back(s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
      if (maxsplit > 0) --maxsplit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string u = utf8_decode(s);
    size_t j = u.size();
    while (maxsplit != 0) {
      while (j > 0 && py_isspace(u[j - 1])) --j;
      if (j == 0) break;
      size_t i = j;
      while (i > 0 && !py_isspace(u[i - 1])) --i;
      out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
      j = i;
      if (maxsplit > 0) --maxsplit;
    }
    while (j > 0 && py_isspace(u[j - 1])) --j;
    if (j > 0) out.push_back(utf8_encode(std::u32string_view(u).substr(0, j)));
  }
  return {out.rbegin(), out.rend()};
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string u = utf8_decode(s);
  size_t start = 0, i = 0;
  while (i < u.size()) {
    char32_t c = u[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
               c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + ((c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ? 2 : 1);
    out.push_back(utf8_encode(std::u32string_view(u).substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl,
                       int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts repl before every code point and at the end
    size_t i = 0;
    while (i <= s.size()) {
      if (count != 0) {
        out += repl;
        if (count > 0) --count;
      }
      if (i == s.size()) break;
      size_t j = i;
      utf8_next(s, j);
      out.append(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t pos = 0;
  while (count != 0) {
    size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out += repl;
    pos = f + old.size();
    if (count > 0) --count;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t py_find(std::string_view s, std::string_view sub, bool reverse) {
  size_t f = reverse ? s.rfind(sub) : s.find(sub);
  if (f == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, f)));
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size()))
    ++n;
  return n;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  bool neg = !sci.empty() && sci[0] == '-';
  if (neg) sci.remove_prefix(1);
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  std::string out = neg ? "-" : "";
  int nd = static_cast<int>(digits.size());
  if (exp >= -4 && exp < 16) {
    int decpt = exp + 1;
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= nd) {
      out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." +
             digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += e;
  }
  return out;
}

double py_round(double x, int64_t ndigits) {
  if (!std::isfinite(x) || ndigits > 308) return x;
  if (ndigits >= 0) {
    // printf rounds the exact binary value correctly (ties to even), as Python's dtoa does.
    std::string buf(400, '\0');
    int n = std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(ndigits), x);
    buf.resize(static_cast<size_t>(n));
    return std::strtod(buf.c_str(), nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-ndigits));
  return std::nearbyint(x / p) * p;
}

std::string py_str_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    char32_t c = utf8_next(s, i);
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      out += buf;
    } else if (c < 0x7F || py_isprintable(c)) {
      utf8_append(out, c);
    } else {
      unsigned v = static_cast<unsigned>(c);
      std::snprintf(buf, sizeof buf,
                    v <= 0xFF     ? "\\x%02x"
                    : v <= 0xFFFF ? "\\u%04x"
                                  : "\\U%08x",
                    v);
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

void json_quote(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    size_t start = i;
    char32_t c = utf8_next(s, i);
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
      if (c >= 0x10000) {
        unsigned v = static_cast<unsigned>(c) - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out.push_back('"');
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> py_unescape(std::string_view body, std::string& out) {
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out.push_back('\\');
        break;
      case '\'':
        out.push_back('\'');
        break;
      case '"':
        out.push_back('"');
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
      case 'u':
      case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
          if (h < 0) {
            return e == 'x'   ? "truncated \\xXX escape"
                   : e == 'u' ? "truncated \\uXXXX escape"
                              : "truncated \\UXXXXXXXX escape";
          }
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) return "illegal Unicode character";
        utf8_append(out, cp);
        i += n;
        break;
      }
      case 'N':
        return "\\N{...} escapes are not supported";
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          }
          utf8_append(out, cp);
        } else {  // unknown escapes stay as written
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return std::nullopt;
}

}  // namespace hearth::chat
