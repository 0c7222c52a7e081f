// --chat for `hearth generate`: one user message rendered through the model's chat template with
// the generation prompt, then encoded without adding special tokens (the template already has
// them), as transformers' apply_chat_template(tokenize=True) does.
#include "chat/template.h"
#include "cli/text_io.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

std::vector<int32_t> render_user_message(const Tokenizer& tokenizer, const std::string& text) {
  const std::string source = tokenizer.chat_template();
  if (source.empty()) fail("--chat: the model has no chat template (tokenizer_config.json)");
  const chat::ChatTemplate tmpl = chat::ChatTemplate::parse(source);
  chat::ChatInputs inputs;
  inputs.messages.push_back({{"role", "user"}, {"content", text}});
  inputs.add_generation_prompt = true;
  inputs.special_tokens["bos_token"] = tokenizer.bos_token();
  inputs.special_tokens["eos_token"] = tokenizer.eos_token();
  return tokenizer.encode(chat::render_chat(tmpl, inputs), false);
}

}  // namespace hearth::cli
