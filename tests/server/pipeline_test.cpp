// The chat pipeline without HTTP: request schemas → prompt → GenerationRequest, and the errors a
// client can cause (template raise_exception, context overflow, bad fields) as ApiError 400s.
#include <gtest/gtest.h>

#include "server/chat_pipeline.h"
#include "server/errors.h"
#include "test_model.h"

namespace hearth::server {
namespace {

class Pipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(testing::qwen3_tokenizer_dir()));
    EngineOptions eo;
    eo.n_ctx = 256;
    model_ = *make_served_model(
        std::make_shared<Engine>(testing::make_scripted_model(*tok, testing::default_scripts()),
                                 tok, ModelConfig::from_json({{"model_type", "qwen3"}}), eo),
        "scripted");
    state_.ready = true;
  }
  ojson body(const std::string& text) {
    return {{"messages", {{{"role", "user"}, {"content", text}}}}};
  }
  ServerState state_;
  ServedModel model_;
};

TEST_F(Pipeline, RendersThroughTheTemplate) {
  PreparedChat p = prepare_chat(state_, model_, parse_openai_chat(body("Hello")));
  EXPECT_EQ(p.prompt_text, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(p.gen.max_tokens, 256 - int64_t(p.gen.prompt.size()));
  EXPECT_EQ(model_.tool_format, chat::ToolCallFormat::Hermes);
  ojson b = body("Hello");
  b["chat_template_kwargs"] = {{"enable_thinking", false}};
  EXPECT_NE(
      prepare_chat(state_, model_, parse_openai_chat(b)).prompt_text.find("<think>\n\n</think>"),
      std::string::npos);
}

TEST_F(Pipeline, TemplateRaiseIsA400WithItsMessage) {
  model_.chat_template =
      chat::ChatTemplate::parse("{{ raise_exception('System role not supported') }}");
  try {
    prepare_chat(state_, model_, parse_openai_chat(body("x")));
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos);
  }
}

TEST_F(Pipeline, ContextOverflowStatesTheNumbers) {
  ojson b = body("Hello");
  b["max_tokens"] = 1000;
  try {
    prepare_chat(state_, model_, parse_openai_chat(b));
    FAIL();
  } catch (const ApiError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("256"), std::string::npos) << m;
    EXPECT_NE(m.find("1000"), std::string::npos) << m;
    EXPECT_EQ(e.code, "context_length_exceeded");
  }
}

TEST_F(Pipeline, SchemaErrorsNameTheField) {
  auto param_of = [&](const ojson& b) {
    try {
      parse_openai_chat(b);
    } catch (const ApiError& e) {
      return e.param;
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(
      param_of({{"messages",
                 {{{"role", "user"}, {"content", "a"}}, {{"role", "bot"}, {"content", "b"}}}}}),
      "messages[1].role");
  ojson b = body("x");
  b["top_p"] = 3;
  EXPECT_EQ(param_of(b), "top_p");
  b = body("x");
  b["logit_bias"] = {{"abc", 1}};
  EXPECT_EQ(param_of(b), "logit_bias");
  b = body("x");
  b["seed"] = "s";
  EXPECT_EQ(param_of(b), "seed");
}

// Every JSON that reaches the template is depth-limited, wherever in the request it sits.
TEST_F(Pipeline, DeeplyNestedInputsAreA400) {
  std::string deep_text = std::string(20000, '[') + std::string(20000, ']');
  ojson b = body("x");
  b["messages"].push_back({{"role", "assistant"},
                           {"content", ""},
                           {"tool_calls",
                            {{{"id", "c1"},
                              {"type", "function"},
                              {"function", {{"name", "f"}, {"arguments", deep_text}}}}}}});
  try {
    parse_openai_chat(b);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "messages[1].tool_calls[0].function.arguments");
  }
  // Nesting built in memory (as an embedder could) is refused when the template sees it.
  ojson deep = ojson::array();
  for (int i = 0; i < 20000; ++i) deep = ojson::array({std::move(deep)});
  b = body("x");
  b["chat_template_kwargs"] = {{"k", std::move(deep)}};
  ChatRequest r = parse_openai_chat(b);
  try {
    prepare_chat(state_, model_, r);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
  } catch (const hearth::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deeper than"), std::string::npos) << e.what();
  }
}

TEST_F(Pipeline, AnthropicBlocksBecomeTemplateMessages) {
  ojson b = ojson::parse(
      R"({"max_tokens": 10, "system": [{"type": "text", "text": "Be brief."}], "messages": [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": [{"type": "thinking", "thinking": "use the tool"},
                                      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                                 {"type": "text", "text": "Thanks"}]}]})");
  ChatRequest r = parse_anthropic_messages(b);
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(r.messages[2]["reasoning_content"], "use the tool");
  EXPECT_EQ(r.messages[3]["role"], "tool");
  EXPECT_EQ(r.messages[4]["content"], "Thanks");
  PreparedChat p = prepare_chat(state_, model_, r);
  EXPECT_NE(p.prompt_text.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos)
      << p.prompt_text;
}

// A block or tool "type" that is not a string is a 400 naming it, not an uncaught JSON type error
// (found by fuzz_request; the input is in its corpus).
TEST_F(Pipeline, NonStringTypesAreBadRequests) {
  const char* bodies[] = {
      R"({"max_tokens": 10, "system": [{"type": ["text"], "text": "x"}],
          "messages": [{"role": "user", "content": "hi"}]})",
      R"({"max_tokens": 10, "messages": [{"role": "user", "content": [{"type": 1, "text": "x"}]}]})"};
  for (const char* text : bodies) {
    try {
      parse_anthropic_messages(ojson::parse(text));
      FAIL() << text;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      EXPECT_NE(std::string(e.what()).find("type"), std::string::npos) << e.what();
    }
  }
  ojson b = body("x");
  b["tools"] = ojson::array({{{"type", {{"a", 1}}}, {"function", {{"name", "f"}}}}});
  try {
    parse_openai_chat(b);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
  }
}

TEST_F(Pipeline, ChatOutputSplitsReasoningAndTools) {
  PreparedChat p;
  p.tool_format = chat::ToolCallFormat::Hermes;
  ChatOutput out(p);
  std::string content, reasoning;
  std::vector<chat::ToolCall> calls;
  const std::string text =
      "<think>\nplan\n</think>\n\nOk.\n<tool_call>\n{\"name\": \"f\", \"arguments\": "
      "{}}\n</tool_call>";
  for (char c : text) {
    auto ev = out.push(std::string(1, c));
    content += ev.content, reasoning += ev.reasoning;
    for (auto& t : ev.calls) calls.push_back(t);
  }
  auto ev = out.finish();
  content += ev.content, reasoning += ev.reasoning;
  for (auto& t : ev.calls) calls.push_back(t);
  EXPECT_EQ(reasoning, "plan");
  EXPECT_EQ(content, "Ok.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "f");
}

// tool_choice: "required" and a named tool append the Hermes opening (the Qwen3 template's
// format) after the generation prompt; "none" offers no tools; a model without a tool-call
// format cannot have a call forced (400).
TEST_F(Pipeline, ToolChoiceForcesTheCallOpening) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}])");
  auto prepare = [&](const ojson& choice) {
    ojson b = body("Weather in Paris?");
    b["tools"] = tools;
    if (!choice.is_null()) b["tool_choice"] = choice;
    return prepare_chat(state_, model_, parse_openai_chat(b));
  };
  const std::string turn = "<|im_start|>assistant\n";
  const PreparedChat automatic = prepare(nullptr);
  EXPECT_EQ(automatic.forced_prefix, "");
  EXPECT_TRUE(automatic.prompt_text.ends_with(turn));
  EXPECT_NE(automatic.prompt_text.find("get_time"), std::string::npos);

  const PreparedChat required = prepare("required");
  EXPECT_EQ(required.forced_prefix, "<tool_call>\n");
  EXPECT_TRUE(required.prompt_text.ends_with(turn + "<tool_call>\n")) << required.prompt_text;
  EXPECT_EQ(required.gen.prompt, model_.engine->tokenizer()->encode(required.prompt_text, false));

  const PreparedChat named =
      prepare({{"type", "function"}, {"function", {{"name", "get_weather"}}}});
  EXPECT_TRUE(
      named.prompt_text.ends_with(turn + "<tool_call>\n{\"name\": \"get_weather\", \"arguments\":"))
      << named.prompt_text;
  EXPECT_EQ(named.prompt_text.find("get_time"), std::string::npos);  // only the named tool shown

  const PreparedChat none = prepare("none");
  EXPECT_EQ(none.forced_prefix, "");
  EXPECT_EQ(none.tool_format, chat::ToolCallFormat::None);
  EXPECT_EQ(none.prompt_text.find("get_weather"), std::string::npos);  // tools not offered

  // The completion continues the forced text and parses into the named call.
  ChatOutput out(named);
  std::vector<chat::ToolCall> calls;
  std::string content;
  for (const char* piece : {" {\"city\"", ": \"Paris\"}", "}\n</tool", "_call>"}) {
    auto ev = out.push(piece);
    content += ev.content;
    for (auto& c : ev.calls) calls.push_back(c);
  }
  auto ev = out.finish();
  content += ev.content;
  for (auto& c : ev.calls) calls.push_back(c);
  EXPECT_EQ(content, "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(nlohmann::json::parse(calls[0].arguments), nlohmann::json({{"city", "Paris"}}));

  model_.tool_format = chat::ToolCallFormat::None;
  try {
    prepare("required");
    FAIL() << "a call was forced without a tool-call format";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, "tool_choice");
  }
}

}  // namespace
}  // namespace hearth::server
