// Decoders of tokenizer.json (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
// Sequence): each rewrites the list of token strings as HF tokenizers' decode_chain does; the
// decoded text is the concatenation of the final list.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // True when a run of <0xXX> byte tokens decodes as a whole (ByteFallback): a token's text can
  // then change with the tokens after it.
  virtual bool groups_byte_tokens() const { return false; }
};

// A SentencePiece byte token, "<0xXX>".
bool is_byte_token(std::string_view token);

// True for a decoder that is exactly ByteLevel (the tokenizer then decodes through a per-id
// byte table instead of strings).
bool is_plain_byte_level(const Decoder* d);

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

}  // namespace hearth::tok
