// Tool-call and reasoning parsers on outputs in the shape real models write them (Qwen3 Hermes
// JSON, Qwen3-Coder/Qwen3.5 XML, Llama 3.1 JSON, Mistral v3 list and v11 [ARGS]); streaming at
// every split point must give the whole-text result and never show a tag as content.
#include "chat/tool_parser.h"

#include <gtest/gtest.h>

#include "chat/reasoning_parser.h"

namespace hearth::chat {
namespace {

using nlohmann::json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "ratio": {"type": "number"}, "options": {"type": "object"}, "tags": {"type": "array"},
    "zip": {"type": "string"}, "note": {"type": ["string", "null"]}}}}}
])");

// Feeds `text` in pieces of `step` bytes (0: every split into two parts is tried by the caller).
ParsedToolCalls stream(ToolCallFormat f, const std::string& text, size_t step) {
  ToolCallParser p(f, kTools);
  ParsedToolCalls out;
  for (size_t i = 0; i < text.size(); i += step) {
    std::string piece = p.push(text.substr(i, step), out.calls);
    EXPECT_EQ(piece.find("<tool_call"), std::string::npos) << piece;
    EXPECT_EQ(piece.find("[TOOL_CALLS"), std::string::npos) << piece;
    out.content += piece;
  }
  out.content += p.finish(out.calls);
  return out;
}

void expect_same_when_streamed(ToolCallFormat f, const std::string& text) {
  const ParsedToolCalls whole = parse_tool_calls(f, text, kTools);
  for (size_t step : {1, 2, 3, 5, 7, 64}) {
    const ParsedToolCalls s = stream(f, text, step);
    EXPECT_EQ(s.content, whole.content) << "step " << step;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << "step " << step;
    for (size_t i = 0; i < s.calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
    }
  }
}

TEST(ToolParser, DetectsFormatFromTemplate) {
  EXPECT_EQ(detect_tool_call_format("{{- '<tool_call>\\n{\"name\": ' }}"), ToolCallFormat::Hermes);
  EXPECT_EQ(detect_tool_call_format("<tool_call>\\n<function=' + tool_call.name"),
            ToolCallFormat::Qwen3Coder);
  EXPECT_EQ(detect_tool_call_format("[TOOL_CALLS] [{{ tool_calls }}]"), ToolCallFormat::Mistral);
  EXPECT_EQ(detect_tool_call_format("<|start_header_id|>... {\"name\": ..., \"parameters\": ...}"),
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(detect_tool_call_format("{{ messages }}"), ToolCallFormat::None);
}

TEST(ToolParser, HermesQwen3) {
  const std::string out =
      "I'll check.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"San "
      "Francisco, CA\", "
      "\"days\": 2}}\n</tool_call>";
  auto r = parse_tool_calls(ToolCallFormat::Hermes, out, kTools);
  EXPECT_EQ(r.content, "I'll check.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.calls[0].arguments),
            json::parse(R"({"city": "San Francisco, CA", "days": 2})"));
  expect_same_when_streamed(ToolCallFormat::Hermes, out);
}

TEST(ToolParser, HermesParallelCallsAndWhitespaceBetween) {
  const std::string out =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
  auto r = parse_tool_calls(ToolCallFormat::Hermes, out, kTools);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(json::parse(r.calls[1].arguments)["city"], "Rome");
  expect_same_when_streamed(ToolCallFormat::Hermes, out);
}

TEST(ToolParser, HermesBrokenJsonIsKeptAsContent) {
  const std::string out =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>";
  auto r = parse_tool_calls(ToolCallFormat::Hermes, out, kTools);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, out);
}

TEST(ToolParser, HermesTextThatOnlyLooksLikeATag) {
  const std::string out = "Use <tool> tags or <tool_ca and stop.";
  auto r = parse_tool_calls(ToolCallFormat::Hermes, out, kTools);
  EXPECT_EQ(r.content, out);
  EXPECT_TRUE(r.calls.empty());
  // Streaming holds the partial tag back but releases it at the end.
  auto s = stream(ToolCallFormat::Hermes, out, 1);
  EXPECT_EQ(s.content, out);
}

TEST(ToolParser, Qwen3CoderXmlTypedBySchema) {
  const std::string out =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew "
      "York\n</parameter>\n<parameter=days>\n3\n"
      "</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=ratio>\n0.5\n</parameter>\n"
      "<parameter=options>\n{\"detail\": \"high\"}\n</parameter>\n<parameter=tags>\n[\"a\", "
      "\"b\"]\n</parameter>\n"
      "<parameter=zip>\n01234\n</parameter>\n<parameter=note>\nnull\n</"
      "parameter>\n<parameter=extra>\n42\n"
      "</parameter>\n</function>\n</tool_call>";
  auto r = parse_tool_calls(ToolCallFormat::Qwen3Coder, out, kTools);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  const json args = json::parse(r.calls[0].arguments);
  EXPECT_EQ(args["city"], "New York");
  EXPECT_EQ(args["days"], 3);
  EXPECT_EQ(args["metric"], true);
  EXPECT_DOUBLE_EQ(args["ratio"].get<double>(), 0.5);
  EXPECT_EQ(args["options"], json::parse(R"({"detail": "high"})"));
  EXPECT_EQ(args["tags"], json::parse(R"(["a", "b"])"));
  EXPECT_EQ(args["zip"], "01234");  // a string stays a string
  EXPECT_TRUE(args["note"].is_null());
  EXPECT_EQ(args["extra"], "42");  // not in the schema: the text
  expect_same_when_streamed(ToolCallFormat::Qwen3Coder, out);
}

TEST(ToolParser, Qwen3CoderMultilineValueAndWrongType) {
  const std::string out =
      "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nline one\nline "
      "two\n</parameter>\n"
      "<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>";
  auto r = parse_tool_calls(ToolCallFormat::Qwen3Coder, out, kTools);
  EXPECT_EQ(r.content, "Sure.");
  ASSERT_EQ(r.calls.size(), 1u);
  const json args = json::parse(r.calls[0].arguments);
  EXPECT_EQ(args["city"], "line one\nline two");
  EXPECT_EQ(args["days"], "three");  // does not convert: kept as text
  expect_same_when_streamed(ToolCallFormat::Qwen3Coder, out);
}

// A parameter's raw text that is not valid UTF-8 (found by fuzz_output_parsers: dump() threw out
// of the parser) is kept with U+FFFD in place of the bad bytes, in the key as in the value.
TEST(ToolParser, Qwen3CoderInvalidUtf8IsReplaced) {
  const std::string out =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar\xffis\n</parameter>\n"
      "<parameter=z\xc3>\n1\n</parameter>\n</function>\n</tool_call>";
  auto r = parse_tool_calls(ToolCallFormat::Qwen3Coder, out, kTools);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  const json args = json::parse(r.calls[0].arguments);
  EXPECT_EQ(args["city"], "Par\xef\xbf\xbdis");
  EXPECT_EQ(args["z\xef\xbf\xbd"], "1");
  expect_same_when_streamed(ToolCallFormat::Qwen3Coder, out);
}

TEST(ToolParser, Llama3Json) {
  const std::string out = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Boston, MA\"}}";
  auto r = parse_tool_calls(ToolCallFormat::Llama3Json, out, kTools);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments)["city"], "Boston, MA");
  expect_same_when_streamed(ToolCallFormat::Llama3Json, out);

  const std::string tagged =
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": "
      "{\"x\": 1}}";
  auto t = parse_tool_calls(ToolCallFormat::Llama3Json, tagged, kTools);
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_EQ(t.calls[1].name, "b");
  expect_same_when_streamed(ToolCallFormat::Llama3Json, tagged);

  const std::string prose = "The weather is {usually} fine.";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::Llama3Json, prose, kTools).content, prose);
  const std::string braces = "{not json at all}";
  EXPECT_EQ(parse_tool_calls(ToolCallFormat::Llama3Json, braces, kTools).content, braces);
}

TEST(ToolParser, MistralListAndArgsForms) {
  const std::string v3 =
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]";
  auto r = parse_tool_calls(ToolCallFormat::Mistral, v3, kTools);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments)["city"], "Paris");
  expect_same_when_streamed(ToolCallFormat::Mistral, v3);

  const std::string v11 =
      "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": "
      "\"Lyon\"}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}";
  auto s = parse_tool_calls(ToolCallFormat::Mistral, v11, kTools);
  EXPECT_EQ(s.content, "Checking.");
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(json::parse(s.calls[1].arguments)["city"], "Nice");
  expect_same_when_streamed(ToolCallFormat::Mistral, v11);
}

TEST(ReasoningParser, SplitsThinkBlock) {
  const std::string out = "<think>\nThe user wants 2+2.\n</think>\n\nIt is 4.";
  auto r = split_reasoning(out, false);
  EXPECT_EQ(r.reasoning, "The user wants 2+2.");
  EXPECT_EQ(r.content, "It is 4.");
  for (size_t step = 1; step < 8; ++step) {
    ReasoningParser p(false);
    ReasoningSplit s;
    for (size_t i = 0; i < out.size(); i += step) {
      auto piece = p.push(out.substr(i, step));
      EXPECT_EQ(piece.content.find('<'), std::string::npos);
      EXPECT_EQ(piece.reasoning.find("</"), std::string::npos);
      s.reasoning += piece.reasoning;
      s.content += piece.content;
    }
    auto end = p.finish();
    EXPECT_EQ(s.reasoning + end.reasoning, r.reasoning);
    EXPECT_EQ(s.content + end.content, r.content);
  }
}

TEST(ReasoningParser, PromptOpenedThinkBlock) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  auto r = split_reasoning("Let me see.\n</think>\n\nDone.", true);
  EXPECT_EQ(r.reasoning, "Let me see.");
  EXPECT_EQ(r.content, "Done.");
  auto u = split_reasoning("Still thinking when cut off", true);
  EXPECT_EQ(u.reasoning, "Still thinking when cut off");
  EXPECT_EQ(u.content, "");
}

TEST(ReasoningParser, NoThinkBlockIsAllContent) {
  auto r = split_reasoning("  Hello <think> is just text here", false);
  EXPECT_EQ(r.content, "  Hello <think> is just text here");
  EXPECT_EQ(r.reasoning, "");
}

}  // namespace
}  // namespace hearth::chat
