// A conversation to prompt tokens with the model's own chat template, as transformers'
// apply_chat_template(tokenize=True, add_generation_prompt=True) does: rendered with the
// tokenizer's bos/eos tokens, then encoded without adding special tokens (the template has them).
// Shared by `hearth generate --chat` and the C++ API.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hearth {
class Tokenizer;
}

namespace hearth::chat {

// `what` names the caller's input in the error raised when the model has no chat template.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                                 const std::string& what);

}  // namespace hearth::chat
