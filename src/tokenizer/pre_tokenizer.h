// Pre-tokenizers of tokenizer.json (ByteLevel, Split, Metaspace, Digits, Whitespace,
// WhitespaceSplit, Punctuation, Sequence). They cut pieces of normalized text into words as HF
// tokenizers' PreTokenizedString::split does: empty pieces are dropped; `first` marks a piece
// that starts at offset 0 of the original input (Metaspace prepend_scheme "first" needs it).
// Pieces are (offset, length) into an arena string; steps that rewrite text append to it.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace hearth::tok {

struct Piece {
  size_t off;
  size_t len;
  bool first;
};

struct PieceList {
  std::string arena;
  std::vector<Piece> pieces;
  std::vector<Piece> next;  // scratch for the step being applied
  std::vector<Span> spans;  // scratch for matches
  std::string_view view(const Piece& p) const {
    return std::string_view(arena).substr(p.off, p.len);
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Rewrites pl.pieces.
  virtual void apply(PieceList& pl) const = 0;
};

class ByteLevelPreTokenizer;

struct PreTokenizerChain {
  std::vector<std::unique_ptr<PreTokenizer>> steps;  // Sequence flattened
  // Set when the last step is ByteLevel and no other step is: the model may then run on raw
  // bytes (set_byte_mode) instead of byte-level chars.
  ByteLevelPreTokenizer* final_byte_level = nullptr;
  void set_byte_mode();
  void apply(PieceList& pl) const {
    for (const auto& s : steps) s->apply(pl);
  }
};

// `j` is the "pre_tokenizer" value (may be null: no steps).
PreTokenizerChain make_pre_tokenizer(const nlohmann::json& j, const std::string& where);

}  // namespace hearth::tok
