// Fuzz target: the parsers of a model's output — reasoning (<think>…</think>) and tool calls in
// every format (Hermes, Qwen3-Coder XML, Llama 3 JSON, Mistral, and none) — as the server chains
// them (reasoning first, its content into the tool-call parser), with the tools of a request so
// XML parameters are typed by their schema. Input: a selector byte (format, whether the prompt
// opened a think block), a chunking byte, then the model's text. Checks the documented streaming
// invariants: push() over the chunks then finish() gives what the whole-text parse gives, for
// both parsers, and every call has a name.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_parser.h"
#include "fuzz/fuzz_util.h"

namespace {

using namespace hearth::chat;
using hearth::fuzz::invariant_failed;

const nlohmann::json& tools() {
  static const nlohmann::json t = nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": ["integer", "null"]},
                     "metric": {"type": "boolean"}, "ratio": {"type": "number"},
                     "tags": {"type": "array"}, "opts": {"type": "object"},
                     "any": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}}}},
    {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
    {"name": "anthropic_style", "input_schema": {"type": "object",
      "properties": {"n": {"type": "integer"}}}}
  ])");
  return t;
}

std::string describe(const std::string& content, const std::vector<ToolCall>& calls) {
  std::string s = "content: [" + content + "]";
  for (const auto& c : calls) s += "\ncall: " + c.name + " " + c.arguments;
  return s;
}

bool same_calls(const std::vector<ToolCall>& a, const std::vector<ToolCall>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].arguments != b[i].arguments) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr ToolCallFormat kFormats[] = {
      ToolCallFormat::None, ToolCallFormat::Hermes, ToolCallFormat::Qwen3Coder,
      ToolCallFormat::Llama3Json, ToolCallFormat::Mistral};
  const ToolCallFormat format = kFormats[data[0] % 5];
  const bool start_in_reasoning = data[0] & 0x80;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);

  // Whole text at once.
  const ReasoningSplit whole = split_reasoning(text, start_in_reasoning);
  const ParsedToolCalls parsed = parse_tool_calls(format, whole.content, tools());

  // The same text in chunks, through both parsers as the server chains them.
  hearth::fuzz::ChunkSizes chunks(data[1]);
  ReasoningParser reasoning(start_in_reasoning);
  ToolCallParser tool_parser(format, tools());
  ReasoningSplit streamed;
  std::string streamed_content;  // of the tool parser, fed the reasoning parser's content
  std::vector<ToolCall> calls;
  for (size_t pos = 0; pos < text.size();) {
    const size_t n = std::min(chunks.next(), text.size() - pos);
    const ReasoningSplit part = reasoning.push(text.substr(pos, n));
    pos += n;
    streamed.reasoning += part.reasoning;
    streamed.content += part.content;
    streamed_content += tool_parser.push(part.content, calls);
  }
  const ReasoningSplit last = reasoning.finish();
  streamed.reasoning += last.reasoning;
  streamed.content += last.content;
  streamed_content += tool_parser.push(last.content, calls);
  streamed_content += tool_parser.finish(calls);

  if (streamed.reasoning != whole.reasoning || streamed.content != whole.content)
    invariant_failed("streamed reasoning split differs from the whole-text split",
                     "whole: [" + whole.reasoning + "] [" + whole.content + "]\nstreamed: [" +
                         streamed.reasoning + "] [" + streamed.content + "]");
  if (streamed_content != parsed.content || !same_calls(calls, parsed.calls))
    invariant_failed("streamed tool-call parse differs from the whole-text parse",
                     "whole:\n" + describe(parsed.content, parsed.calls) + "\nstreamed:\n" +
                         describe(streamed_content, calls));
  for (const ToolCall& c : parsed.calls)
    if (c.name.empty()) invariant_failed("a tool call without a name");
  prompt_opens_reasoning(text);
  return 0;
}
