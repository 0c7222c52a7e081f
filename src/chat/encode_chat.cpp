#include "chat/encode_chat.h"

#include "chat/template.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace hearth::chat {

std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                                 const std::string& what) {
  const std::string source = tokenizer.chat_template();
  if (source.empty()) fail("{}: the model has no chat template (tokenizer_config.json)", what);
  ChatInputs inputs;
  inputs.messages = messages;
  inputs.add_generation_prompt = true;
  inputs.special_tokens["bos_token"] = tokenizer.bos_token();
  inputs.special_tokens["eos_token"] = tokenizer.eos_token();
  return tokenizer.encode(render_chat(ChatTemplate::parse(source), inputs), false);
}

}  // namespace hearth::chat
