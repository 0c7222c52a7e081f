// Where a model folder keeps its chat template and special tokens: chat_template.jinja, or
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template} with
// "default" used), and bos/eos/unk/sep/pad/cls/mask tokens (strings or {"content": ...}
// objects) plus "extra_special_tokens". Read directly so src/chat does not depend on the
// tokenizer; the map matches transformers' special_tokens_map for the files we test.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace hearth::chat {

struct TemplateSource {
  std::optional<std::string> template_text;  // empty when the model ships no chat template
  std::string origin;                        // file it came from, for error messages
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();  // name -> string
};

// Throws hearth::Error naming the file on unreadable or malformed JSON.
TemplateSource load_template_source(const std::string& model_dir);

}  // namespace hearth::chat
