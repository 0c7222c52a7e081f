// The BPE model of tokenizer.json: vocabulary, merges ranked by position, unk / byte_fallback /
// fuse_unk / ignore_merges / continuing_subword_prefix / end_of_word_suffix, exactly as HF
// tokenizers' models/bpe. Merging uses a rank-min heap over a linked list of symbols
// (O(n log n) for any word) and a bounded per-thread word cache.
// In byte mode (the pre-tokenizer ends with ByteLevel) words arrive as raw bytes and the model
// looks tokens up by their raw bytes; ids and merges are those of the byte-level vocabulary.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/hash.h"

namespace hearth::tok {

// Token ids index dense tables (tens of bytes an id). Files may leave holes in the id space (some
// between the vocabulary and the added tokens) but an id this far past the number of tokens is
// refused, so a hostile file cannot size those tables.
inline constexpr int64_t kMaxTokenIdHoles = int64_t{1} << 16;

class BpeModel {
 public:
  // vocab: (token, id) pairs; merges: (left, right) pairs in rank order. Throws hearth::Error
  // (prefixed by `where`) on merges whose tokens are not in the vocabulary and on ids past
  // vocab.size() + kMaxTokenIdHoles.
  struct Options {
    std::string unk_token;  // empty: none
    bool has_unk = false;
    bool fuse_unk = false;
    bool byte_fallback = false;
    bool ignore_merges = false;
    std::string continuing_subword_prefix;
    std::string end_of_word_suffix;
  };
  void build(std::vector<std::pair<std::string, int32_t>> vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, Options options,
             const std::string& where);
  // Switches to raw-byte input (see file comment). Only valid without prefix/suffix.
  void enable_byte_mode();
  bool byte_mode() const { return byte_mode_; }
  bool can_use_byte_mode() const {
    return options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
  }

  // Appends the ids of one pre-tokenized word (model alphabet, or raw bytes in byte mode).
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  bool has_id(int32_t id) const {
    return id >= 0 && id < size() && present_[static_cast<size_t>(id)];
  }
  const std::string& token(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  int32_t find(std::string_view token) const {  // model alphabet
    return index_.find(
        token, [this](int32_t id) -> std::string_view { return tokens_[static_cast<size_t>(id)]; });
  }

 private:
  int32_t find_input(std::string_view key) const;  // mode-aware lookup of an input string
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;

  Options options_;
  std::vector<std::string> tokens_;  // id → token; "" for ids not in the vocabulary
  std::vector<uint8_t> present_;
  StringIdMap index_;
  U64Map merges_;  // (left id, right id) → (rank, merged id)
  int32_t unk_id_ = -1;
  bool byte_mode_ = false;
  std::array<int32_t, 256> byte_ids_{};  // raw byte → id of its single-char token (byte mode)
  uint64_t cache_owner_ = 0;
};

// Frees this thread's word cache. A huge input fills it with words unlikely to recur; after one,
// the caller gives the memory back instead of keeping it for the thread's life.
void release_word_cache();

// The GPT-2 byte ↔ unicode-char table used by ByteLevel pre-tokenizer and decoder.
const std::array<char32_t, 256>& byte_level_chars();
// Byte for a byte-level char, or -1 when the char is not in the table.
int byte_level_byte(char32_t c);
// Appends the byte-level form (UTF-8 of mapped chars) of raw bytes.
void byte_level_encode(std::string_view raw, std::string& out);
// Raw bytes of a byte-level token; false (and `out` untouched) if a char is outside the table.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace hearth::tok
