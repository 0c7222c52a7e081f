// UTF-8 validation/replacement, Rust-compatible character classes and utf8proc normalisation.
// The lossy decoder follows the WHATWG/Unicode "maximal subpart" rule so that invalid input is
// replaced exactly as the Python reference script does before it calls HF tokenizers.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdlib>

namespace hearth::tok {

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
// Length of the valid sequence at s[i], or -k where k is the length of the maximal invalid
// subpart (at least 1). Ranges per Unicode Table 3-7.
int utf8_sequence_at(std::string_view s, size_t i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    n = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    n = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    n = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= s.size()) return -k;
    auto c = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return -k;
  }
  return n;
}
}  // namespace

size_t utf8_valid_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int n = utf8_sequence_at(s, i);
    if (n < 0) return i;
    i += n;
  }
  return i;
}

bool utf8_is_valid(std::string_view s) { return utf8_valid_prefix(s) == s.size(); }

bool utf8_incomplete_tail(std::string_view s) {
  size_t i = utf8_valid_prefix(s);
  if (i == s.size()) return false;
  int n = utf8_sequence_at(s, i);
  return n < 0 && i + static_cast<size_t>(-n) == s.size() &&
         utf8_len(static_cast<unsigned char>(s[i])) > -n;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t valid = i + utf8_valid_prefix(s.substr(i));
    out.append(s.data() + i, valid - i);
    i = valid;
    if (i >= s.size()) break;
    int n = utf8_sequence_at(s, i);
    out.append("\xEF\xBF\xBD");
    i += static_cast<size_t>(-n);
  }
  return out;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

bool is_word_char(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

namespace {
void normalize_chunk(std::string_view s, NormForm form, std::string& out) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::NFC:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormForm::NFD:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormForm::NFKC:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormForm::NFKD:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* result = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                        static_cast<utf8proc_ssize_t>(s.size()), &result,
                        static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    out.append(s);  // cannot happen on valid UTF-8; keep the text rather than lose it
  } else {
    out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  }
  std::free(result);
}
}  // namespace

std::string unicode_normalize(std::string_view s, NormForm form) {
  // An ASCII character never combines with what precedes it, so the text splits into chunks at
  // every ASCII character that is followed by ASCII; only chunks with non-ASCII go to utf8proc.
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    while (j < s.size() && static_cast<unsigned char>(s[j]) < 0x80) ++j;
    if (j == s.size()) {
      out.append(s.substr(i));
      break;
    }
    size_t start = j > i ? j - 1 : j;  // the ASCII char before may be a composition base
    out.append(s.substr(i, start - i));
    size_t end = j;
    while (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80) ++end;
    normalize_chunk(s.substr(start, end - start), form, out);
    i = end;
  }
  return out;
}

std::string unicode_lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = utf8_next(s, i);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    } else if (c == 0x130) {
      out.append("i\xCC\x87");  // full lowercase mapping: i + combining dot above
    } else {
      utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

}  // namespace hearth::tok
