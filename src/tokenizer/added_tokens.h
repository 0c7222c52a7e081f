// Added tokens (tokenizer.json "added_tokens"): finds them in text before the model runs, as HF's
// AddedVocabulary does: leftmost-longest matching over a byte trie, then single_word (discard
// matches inside words), lstrip (absorb whitespace before), rstrip (absorb whitespace after).
// Tokens with normalized=false are matched on the raw text; normalized=true ones on each
// normalized piece, using their normalized content.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hash.h"

namespace hearth::tok {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

struct TextSplit {
  size_t begin;
  size_t end;
  int32_t id;  // -1: plain text for the model
};

class AddedTokenMatcher {
 public:
  // `patterns[i]` is what to look for (content, or its normalized form) for `tokens[i]`.
  void build(std::vector<AddedToken> tokens, const std::vector<std::string>& patterns);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into added-token matches and plain pieces (an empty text gives no splits).
  void split(std::string_view text, std::vector<TextSplit>& out) const;

 private:
  // Longest token starting at `pos`: index into tokens_ and its end, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& end) const;

  std::vector<AddedToken> tokens_;
  U64Map edges_;                   // (node << 8 | byte) → (child node, 0)
  std::vector<int32_t> terminal_;  // node → token index or -1
  bool first_byte_[256] = {};
};

}  // namespace hearth::tok
