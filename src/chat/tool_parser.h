// Tool-call parsers: turn a model's text into OpenAI-style tool calls, for the formats models
// are trained on: Hermes/Qwen3 JSON inside <tool_call>…</tool_call>, Qwen3.5/Qwen3-Coder XML
// (<tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>, values typed by
// the tool's JSON schema), Llama 3 JSON ({"name", "parameters"}, optionally after <|python_tag|>)
// and Mistral [TOOL_CALLS] (a JSON list, or NAME[ARGS]{…} in newer tokenizers).
// Streaming invariants: content is released as soon as it cannot be part of a tool call; partial
// tags and tool-call bodies are never released as content; a body that does not parse is given
// back as content verbatim (nothing is lost); whitespace-only content next to tool calls is
// dropped. push()+finish() over any split of a text gives the same result as parse_tool_calls().
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::chat {

enum class ToolCallFormat { None, Hermes, Qwen3Coder, Llama3Json, Mistral };

// Picks the format a chat template asks for (by the markup it renders tool calls with).
ToolCallFormat detect_tool_call_format(std::string_view chat_template);
const char* tool_call_format_name(ToolCallFormat format);
// Formats whose markers are special tokens, so the text must be decoded with them.
bool tool_call_format_needs_special_tokens(ToolCallFormat format);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, serialised
};

class ToolCallParser {
 public:
  // tools: the request's OpenAI-style tools array (for argument types); may be null.
  ToolCallParser(ToolCallFormat format, nlohmann::json tools = nullptr);
  // Feeds content; returns the content now safe to show; appends finished calls to `calls`.
  std::string push(std::string_view text, std::vector<ToolCall>& calls);
  // End of output: flushes what was held back (an unterminated call is parsed if it can be).
  std::string finish(std::vector<ToolCall>& calls);
  bool saw_calls() const { return n_calls_ > 0; }

 private:
  enum class State { Start, Outside, Inside };
  std::string release_outside(bool final);
  bool parse_body(std::string_view body, std::vector<ToolCall>& calls) const;

  ToolCallFormat format_;
  nlohmann::json tools_;
  State state_ = State::Start;
  std::string pending_;
  std::string held_ws_;  // whitespace held back: dropped if a tool call follows
  size_t n_calls_ = 0;
};

struct ParsedToolCalls {
  std::string content;
  std::vector<ToolCall> calls;
};
ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text,
                                 const nlohmann::json& tools = nullptr);

// Converts an XML parameter's text to JSON by the JSON-schema type the tool declares for it
// (string when unknown; the text itself when it does not convert).
nlohmann::json convert_parameter(std::string_view value, const nlohmann::json& schema);

}  // namespace hearth::chat
