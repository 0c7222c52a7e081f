// Enforcing tool_choice "required" and a named tool without a grammar engine: the server appends
// the opening of the model's own tool-call markup to the prompt, right after the generation
// prompt, so the model continues inside a call. "required" forces the opening tag; a named
// choice forces the opening up to and including the function name (and the arguments key in
// the JSON formats), so only the arguments are left to the model. The completion is parsed with
// the forced text in front of it, as if the model had written it. Arguments are not
// grammar-constrained: a body that does not parse comes back as content, as with "auto".
// Invariant: every forced prefix ends on a boundary where the tokenizer splits the template's
// own rendering too (after a newline or a `":`), never before a space it would merge with
// the next token.
#pragma once
#include <string>
#include <string_view>

#include "chat/tool_parser.h"

namespace hearth::chat {

// The text to append after the generation prompt to force a tool call in `format`
// (`function_name` empty: any tool, i.e. "required"). `chat_template` tells Mistral's
// NAME[ARGS]{…} style (v11+) from its JSON-list style. When the rendered prompt left a think
// block open (`prompt_opens_reasoning`), the prefix closes it first: a forced call skips
// reasoning. Empty when the format is None (nothing can be forced).
std::string forced_tool_call_prefix(ToolCallFormat format, std::string_view function_name,
                                    std::string_view chat_template,
                                    bool prompt_opens_reasoning = false);

}  // namespace hearth::chat
