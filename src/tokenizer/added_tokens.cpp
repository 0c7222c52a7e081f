// Trie-based leftmost-longest search for added tokens, then HF's find_matches rules. A match
// rejected by single_word is skipped without retrying shorter tokens at that position, as the
// Aho-Corasick iterator in HF does.
#include "tokenizer/added_tokens.h"

#include "tokenizer/unicode.h"

namespace hearth::tok {

void AddedTokenMatcher::build(std::vector<AddedToken> tokens,
                              const std::vector<std::string>& patterns) {
  tokens_ = std::move(tokens);
  terminal_.assign(1, -1);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    int32_t node = 0;
    for (unsigned char b : p) {
      uint64_t key = (static_cast<uint64_t>(node) << 8) | b;
      if (const auto* e = edges_.find(key)) {
        node = e->a;
      } else {
        int32_t child = static_cast<int32_t>(terminal_.size());
        terminal_.push_back(-1);
        edges_.insert_or_assign(key, {child, 0});
        node = child;
      }
    }
    // With duplicate contents the first token wins; HF's map order is unspecified there.
    if (terminal_[static_cast<size_t>(node)] < 0)
      terminal_[static_cast<size_t>(node)] = static_cast<int32_t>(t);
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& end) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto* e =
        edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (!e) break;
    node = e->a;
    if (terminal_[static_cast<size_t>(node)] >= 0) {
      best = terminal_[static_cast<size_t>(node)];
      end = i + 1;
    }
  }
  return best;
}

namespace {
char32_t last_char(std::string_view s) {
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return utf8_next(s, k);
}
char32_t first_char(std::string_view s) {
  size_t i = 0;
  return utf8_next(s, i);
}
}  // namespace

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSplit>& out) const {
  if (text.empty()) return;
  size_t start_offset = 0;
  if (!tokens_.empty()) {
    size_t pos = 0;
    while (pos < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
        ++pos;
        continue;
      }
      size_t stop = 0;
      int32_t t = longest_at(text, pos, stop);
      if (t < 0) {
        ++pos;
        continue;
      }
      size_t start = pos;
      pos = stop;  // the search resumes after the match whatever the rules below decide
      const AddedToken& tok = tokens_[static_cast<size_t>(t)];
      if (tok.single_word) {
        bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
        bool stop_space = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
        if (!start_space || !stop_space) continue;
      }
      if (tok.lstrip) {
        size_t s = start;
        while (s > 0) {
          size_t k = s - 1;
          while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
          size_t i = k;
          if (!is_whitespace(utf8_next(text, i))) break;
          s = k;
        }
        start = std::max(s, start_offset);
      }
      if (tok.rstrip) {
        while (stop < text.size()) {
          size_t i = stop;
          if (!is_whitespace(utf8_next(text, i))) break;
          stop = i;
        }
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, tok.id});
      start_offset = stop;
    }
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace hearth::tok
