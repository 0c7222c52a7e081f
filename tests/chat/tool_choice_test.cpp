// Forced tool-call prefixes (tool_choice "required" / named): for each format, the prefix is what
// that format's chat template renders at the start of an assistant tool call, and a completion
// that continues it parses into the call, whole or streamed at every split.
#include "chat/tool_choice.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/reasoning_parser.h"
#include "chat/template.h"

namespace hearth::chat {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(HEARTH_TEST_DATA) + "/chat/templates/" + name, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

// The template's rendering of a conversation whose assistant turn is a get_weather call.
std::string render_call(const std::string& source) {
  ChatInputs in;
  in.messages = ordered_json::parse(R"([
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "abcdef123", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
    {"role": "tool", "tool_call_id": "abcdef123", "content": "18 C"}])");
  in.tools = ordered_json::parse(kTools.dump());
  in.add_generation_prompt = false;
  in.special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  return render_chat(ChatTemplate::parse(source), in);
}

// Parses prefix + completion through a streaming parser, split at `step` bytes.
ParsedToolCalls parse_streamed(ToolCallFormat f, const std::string& prefix,
                               const std::string& completion, size_t step) {
  ToolCallParser p(f, kTools);
  ParsedToolCalls out;
  out.content = p.push(prefix, out.calls);
  for (size_t i = 0; i < completion.size(); i += step)
    out.content += p.push(completion.substr(i, step), out.calls);
  out.content += p.finish(out.calls);
  return out;
}

struct Case {
  const char* template_file;
  ToolCallFormat format;
  std::string required;      // expected prefix for "required"
  std::string named;         // expected prefix for the named get_weather
  std::string continuation;  // what a model writes after the named prefix
};

class ForcedPrefix : public ::testing::TestWithParam<Case> {};

TEST_P(ForcedPrefix, MatchesTheTemplateAndParses) {
  const Case& c = GetParam();
  const std::string source = read_template(c.template_file);
  ASSERT_EQ(detect_tool_call_format(source), c.format);
  EXPECT_EQ(forced_tool_call_prefix(c.format, "", source), c.required);
  const std::string named = forced_tool_call_prefix(c.format, "get_weather", source);
  EXPECT_EQ(named, c.named);
  // The model continues exactly where the template's own rendering of a call would.
  const std::string rendered = render_call(source);
  EXPECT_NE(rendered.find(named + c.continuation.substr(0, 3)), std::string::npos) << "rendered:\n"
                                                                                   << rendered;
  EXPECT_EQ(named.rfind(c.required, 0), 0u) << "the named prefix extends the required one";
  for (size_t step : {1, 2, 5, 1000}) {
    const ParsedToolCalls r = parse_streamed(c.format, named, c.continuation, step);
    EXPECT_EQ(r.content, "") << "step " << step;
    ASSERT_EQ(r.calls.size(), 1u) << "step " << step;
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(r.calls[0].arguments), json::parse(R"({"city": "Paris", "days": 2})"));
  }
  // "required": the model names the tool itself.
  const std::string after_required = named.substr(c.required.size()) + c.continuation;
  const ParsedToolCalls r = parse_streamed(c.format, c.required, after_required, 3);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
}

INSTANTIATE_TEST_SUITE_P(
    Formats, ForcedPrefix,
    ::testing::Values(
        Case{"hermes.jinja", ToolCallFormat::Hermes, "<tool_call>\n",
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\":",
             " {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>"},
        Case{"qwen3_5.jinja", ToolCallFormat::Qwen3Coder, "<tool_call>\n",
             "<tool_call>\n<function=get_weather>\n",
             "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
             "</function>\n</tool_call>"},
        Case{"mistral.jinja", ToolCallFormat::Mistral, "[TOOL_CALLS]",
             "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\":",
             " {\"city\": \"Paris\", \"days\": 2}}]"},
        Case{
            "llama3_1_tools.jinja", ToolCallFormat::Llama3Json, "{\"name\": \"",
            "{\"name\": \"get_weather\", \"parameters\":", " {\"city\": \"Paris\", \"days\": 2}}"}),
    [](const auto& info) { return std::string(tool_call_format_name(info.param.format)); });

TEST(ForcedPrefix, MistralArgsStyleAndNone) {
  EXPECT_EQ(forced_tool_call_prefix(ToolCallFormat::Mistral, "get_weather",
                                    "{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}"),
            "[TOOL_CALLS]get_weather[ARGS]");
  const auto r = parse_tool_calls(ToolCallFormat::Mistral,
                                  "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", kTools);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(forced_tool_call_prefix(ToolCallFormat::None, "get_weather", ""), "");
}

TEST(ForcedPrefix, ClosesAnOpenThinkBlockFirst) {
  // Qwen3.5's generation prompt ends with "<think>\n" when thinking is on.
  const std::string prefix =
      forced_tool_call_prefix(ToolCallFormat::Qwen3Coder, "get_weather", "", true);
  EXPECT_EQ(prefix, "\n</think>\n\n<tool_call>\n<function=get_weather>\n");
  ReasoningParser reasoning(true);
  ToolCallParser tools(ToolCallFormat::Qwen3Coder, kTools);
  std::vector<ToolCall> calls;
  std::string content, thought;
  for (const std::string& piece : {prefix, std::string("<parameter=city>\nParis\n</parameter>\n"),
                                   std::string("</function>\n</tool_call>")}) {
    const ReasoningSplit s = reasoning.push(piece);
    thought += s.reasoning;
    content += tools.push(s.content, calls);
  }
  const ReasoningSplit s = reasoning.finish();
  thought += s.reasoning;
  content += tools.push(s.content, calls);
  content += tools.finish(calls);
  EXPECT_EQ(thought, "");
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(json::parse(calls[0].arguments), json::parse(R"({"city": "Paris"})"));
}

TEST(ForcedPrefix, AnUnparsableBodyComesBackAsContentWithThePrefix) {
  const std::string prefix = forced_tool_call_prefix(ToolCallFormat::Hermes, "get_weather", "");
  const ParsedToolCalls r = parse_streamed(ToolCallFormat::Hermes, prefix, " lorem ipsum", 4);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, prefix + " lorem ipsum");
}

}  // namespace
}  // namespace hearth::chat
