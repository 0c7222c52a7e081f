// The parts of a loaded tokenizer, shared by tokenizer.cpp (encode/decode), tokenizer_load.cpp
// (building it from the JSON files) and stream_decoder.cpp. Immutable after load.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

struct Tokenizer::Impl {
  std::unique_ptr<tok::Normalizer> normalizer;
  tok::PreTokenizerChain pre_tokenizer;
  tok::BpeModel model;
  tok::AddedTokenMatcher raw_added;         // normalized=false tokens, matched on raw text
  tok::AddedTokenMatcher normalized_added;  // normalized=true tokens, matched after normalizing
  tok::PostProcessor post_processor;
  std::unique_ptr<tok::Decoder> decoder;
  bool byte_level_decode_fast = false;      // decoder is plain ByteLevel: use id_bytes
  bool decoder_groups_byte_tokens = false;  // decoder has a ByteFallback step

  enum Kind : uint8_t { kNone = 0, kModel = 1, kAdded = 2, kSpecial = 3 };
  std::vector<tok::AddedToken> added_tokens;
  // id → token string (added tokens take precedence); views into model / added_tokens.
  std::vector<std::string_view> id_text;
  std::vector<uint8_t> id_kind;
  std::vector<std::string> id_bytes;  // id → ByteLevel-decoded bytes (fast path only)
  std::unordered_map<std::string, int32_t> added_index;

  std::string bos_token, eos_token, pad_token;
  std::optional<int32_t> bos_id, eos_id, pad_id;
  std::map<std::string, std::string> chat_templates;
};

}  // namespace hearth
