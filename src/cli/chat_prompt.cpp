// --chat for `hearth generate`: one user message rendered through the model's chat template.
#include "cli/text_io.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

std::vector<int32_t> render_user_message(const Tokenizer& tokenizer, const std::string& text) {
  (void)text;
  if (tokenizer.chat_template().empty()) fail("--chat: the model has no chat template");
  fail("--chat: chat templates are not wired into generate yet");
}

}  // namespace hearth::cli
