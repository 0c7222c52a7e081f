// Fast reader for tokenizer.json: a small recursive-descent JSON parser that stores model.vocab
// and model.merges straight into vectors (they are >95% of the file; a DOM for them costs ~3x
// the parse, and nlohmann's lexer alone ~50 ms on Qwen3's 11 MB) and builds an nlohmann::json
// DOM for everything else. Strict JSON (RFC 8259): errors name the byte offset.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::tok {

struct TokenizerJson {
  nlohmann::json doc;  // the file without model.vocab / model.merges
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  bool has_vocab = false;
  bool has_merges = false;
};

// Throws hearth::Error prefixed with `file` ("tokenizer.json: model.merges[12]: ...").
TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& file);

}  // namespace hearth::tok
