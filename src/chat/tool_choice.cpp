// Forced tool-call openings, per format, written the way the formats' chat templates render an
// assistant's tool call (tests/chat/tool_choice_test.cpp checks them against those renderings).
#include "chat/tool_choice.h"

#include <nlohmann/json.hpp>

namespace hearth::chat {

namespace {

// A function name as a JSON string body (names are identifiers in practice; escape anyway).
std::string json_name(std::string_view name) { return nlohmann::json(std::string(name)).dump(); }

}  // namespace

std::string forced_tool_call_prefix(ToolCallFormat format, std::string_view name,
                                    std::string_view chat_template, bool opens_reasoning) {
  std::string out;
  switch (format) {
    case ToolCallFormat::None:
      return {};
    case ToolCallFormat::Hermes:
      // <tool_call>\n{"name": "X", "arguments": {…}}\n</tool_call>
      out = "<tool_call>\n";
      if (!name.empty()) out += "{\"name\": " + json_name(name) + ", \"arguments\":";
      break;
    case ToolCallFormat::Qwen3Coder:
      // <tool_call>\n<function=X>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>.
      // For "required" the prefix stops at the newline: "<function" is one pre-token with what
      // follows, so forcing it alone would split where the template's rendering does not.
      out = "<tool_call>\n";
      if (!name.empty()) out += "<function=" + std::string(name) + ">\n";
      break;
    case ToolCallFormat::Mistral:
      // v11+: [TOOL_CALLS]X[ARGS]{…}; earlier: [TOOL_CALLS] [{"name": "X", "arguments": {…}}]
      out = "[TOOL_CALLS]";
      if (!name.empty()) {
        if (chat_template.find("[ARGS]") != std::string_view::npos)
          out += std::string(name) + "[ARGS]";
        else
          out += " [{\"name\": " + json_name(name) + ", \"arguments\":";
      }
      break;
    case ToolCallFormat::Llama3Json:
      // {"name": "X", "parameters": {…}} as the whole message; "required" forces the object's
      // start up to the name's opening quote, so plain text cannot come first.
      out = name.empty() ? "{\"name\": \"" : "{\"name\": " + json_name(name) + ", \"parameters\":";
      break;
  }
  // The generation prompt ended inside "<think>\n": close the block the way templates render
  // an empty one ("<think>\n\n</think>\n\n").
  if (opens_reasoning) out = "\n</think>\n\n" + out;
  return out;
}

}  // namespace hearth::chat
