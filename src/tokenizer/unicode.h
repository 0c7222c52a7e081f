// UTF-8 and Unicode helpers for the tokenizer: decoding code points, replacing invalid UTF-8 the
// way Rust's String::from_utf8_lossy and Python's 'replace' do (one U+FFFD per maximal invalid
// subpart), character classes with Rust's char semantics, and normalisation forms via utf8proc.
// Invariant: every function taking text assumes valid UTF-8 unless its name says otherwise.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace hearth::tok {

// Length of the UTF-8 sequence starting with lead byte `b` (1 for invalid lead bytes).
inline int utf8_len(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) return 2;
  if ((b & 0xF0) == 0xE0) return 3;
  if ((b & 0xF8) == 0xF0) return 4;
  return 1;
}

// Decodes the code point at s[i] (valid UTF-8) and advances i.
inline char32_t utf8_next(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  int n = utf8_len(b);
  char32_t cp = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < n && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void utf8_append(std::string& out, char32_t cp);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t utf8_valid_prefix(std::string_view s);
// True when `s` ends in the middle of a UTF-8 sequence that more bytes could complete.
bool utf8_incomplete_tail(std::string_view s);
// Replaces every maximal invalid subpart with U+FFFD (Unicode's recommended practice, as
// Rust's from_utf8_lossy and Python's bytes.decode('utf-8', 'replace')).
std::string utf8_lossy(std::string_view s);
bool utf8_is_valid(std::string_view s);

// Character classes with Rust's std semantics (what HF tokenizers calls).
bool is_whitespace(char32_t c);   // White_Space property (char::is_whitespace)
bool is_numeric(char32_t c);      // Nd | Nl | No (char::is_numeric)
bool is_punctuation(char32_t c);  // ASCII punctuation or general category P*
bool is_word_char(char32_t c);    // regex \w: letters, marks, Nd, Nl, Pc, ZWJ/ZWNJ

enum class NormForm { NFC, NFD, NFKC, NFKD };
// Normalises valid UTF-8 text; ASCII runs are copied without calling utf8proc.
std::string unicode_normalize(std::string_view s, NormForm form);
// Lower-cases per character (char::to_lowercase, full mapping for U+0130).
std::string unicode_lowercase(std::string_view s);

}  // namespace hearth::tok
