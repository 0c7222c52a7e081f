// Fuzz target: a chat template's text through the Jinja lexer, parser and evaluator, rendered
// against one fixed conversation (system, user, assistant with reasoning and tool calls, tool
// results, multimodal content parts, tools and documents, enable_thinking, and the variables of
// the reference snippets in tests/data/chat/reference.json) with the render limits
// the server uses (RenderOptions' defaults) and a fixed clock. Templates come from model files,
// so a hostile one must end in a TemplateError, never a crash, hang or unbounded memory. The tool
// format the server would detect in the text, and its forced tool-call prefix, are derived too.
#include <cstddef>
#include <cstdint>
#include <string>

#include "chat/template.h"
#include "chat/tool_choice.h"
#include "chat/tool_parser.h"
#include "core/error.h"
#include "fuzz/fuzz_util.h"

namespace {

using hearth::chat::ChatInputs;
using nlohmann::ordered_json;

const ChatInputs& inputs() {
  static const ChatInputs in = [] {
    ChatInputs c;
    c.messages = ordered_json::parse(R"([
      {"role": "system", "content": "You are terse. Today is {{ not a template }}."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and 2+2?"},
                                   {"type": "image_url", "image_url": {"url": "data:,"}}]},
      {"role": "assistant", "content": "", "reasoning_content": "Two tools.\n",
       "tool_calls": [
         {"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
         {"id": "call_2", "type": "function",
          "function": {"name": "add", "arguments": {"a": 2, "b": 2.5, "exact": true}}}]},
      {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
       "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
      {"role": "tool", "tool_call_id": "call_2", "content": "4.5"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nParis: 21°C; 4.5."},
      {"role": "user", "content": "Thanks! ünïcödé \u0000 and \"quotes\" <|im_end|>"}
    ])");
    c.tools = ordered_json::parse(R"([
      {"type": "function", "function": {"name": "get_weather", "description": "Forecast",
        "parameters": {"type": "object", "required": ["city"], "properties": {
          "city": {"type": "string", "description": "City name"},
          "days": {"type": ["integer", "null"], "enum": [1, 2, 3]}}}}},
      {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"},
                       "exact": {"type": "boolean"}}}}}
    ])");
    c.documents = ordered_json::parse(R"([{"title": "Doc", "text": "Some text."}])");
    c.add_generation_prompt = true;
    c.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}, {"pad_token", "<pad>"}};
    // The variables of the construct-by-construct reference snippets (tests/chat), so the
    // snippets in the corpus render what they were written for.
    c.kwargs = ordered_json::parse(hearth::fuzz::read_required(
        hearth::fuzz::source_path("tests/data/chat/reference.json")))["snippet_context"];
    c.kwargs["enable_thinking"] = true;
    c.kwargs["date_string"] = "26 Jul 2024";
    return c;
  }();
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  inputs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hearth::chat;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  const ToolCallFormat format = detect_tool_call_format(source);
  forced_tool_call_prefix(format, "get_weather", source, true);
  try {
    const ChatTemplate tmpl = ChatTemplate::parse(source);
    RenderOptions options;        // the server's limits
    options.now = 1'721'995'200;  // a fixed strftime_now clock keeps runs reproducible
    render_chat(tmpl, inputs(), options);
  } catch (const hearth::Error&) {
  }
  return 0;
}
