// The Responses API without HTTP: the stored-response bounds (count, bytes, least recently used
// out first), request items → template messages (one assistant turn per run of reasoning,
// message and function_call items; a follow-up's prompt extends the previous prompt and output),
// the 400s naming the field, and the SSE event grammar of ResponsesOutput.
#include <gtest/gtest.h>

#include "server/chat_pipeline.h"
#include "server/errors.h"
#include "server/responses_output.h"
#include "server/responses_store.h"
#include "server/schemas_responses.h"
#include "test_model.h"

namespace hearth::server {
namespace {

std::shared_ptr<StoredResponse> entry(size_t n) {
  auto e = std::make_shared<StoredResponse>();
  e->conversation = std::string(n, 'x');
  return e;
}

TEST(ResponseStore, CountBoundEvictsTheLeastRecentlyUsed) {
  ResponseStore store(3, size_t{1} << 20);
  for (const char* id : {"a", "b", "c"}) EXPECT_TRUE(store.put(id, entry(10)));
  ASSERT_NE(store.get("a"), nullptr);  // a is now the most recent; b the least
  EXPECT_TRUE(store.put("d", entry(10)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.get("b"), nullptr);
  EXPECT_NE(store.get("a"), nullptr);
  EXPECT_NE(store.get("c"), nullptr);
  EXPECT_NE(store.get("d"), nullptr);
}

TEST(ResponseStore, ByteBoundAndOversizedEntries) {
  const size_t one = entry(1000)->bytes();
  ResponseStore store(100, 3 * one);
  for (const char* id : {"a", "b", "c", "d"}) EXPECT_TRUE(store.put(id, entry(1000)));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.bytes(), 3 * one);
  EXPECT_EQ(store.get("a"), nullptr);
  EXPECT_FALSE(store.put("huge", entry(10 * one)));  // over the bound alone: not kept
  EXPECT_EQ(store.get("huge"), nullptr);
  EXPECT_EQ(store.size(), 3u);
  // Replacing an id frees the old entry's bytes.
  EXPECT_TRUE(store.put("b", entry(10)));
  EXPECT_EQ(store.bytes(), 2 * one + entry(10)->bytes());
  EXPECT_TRUE(store.erase("b"));
  EXPECT_FALSE(store.erase("b"));
  EXPECT_EQ(store.bytes(), 2 * one);
  store.set_limits(1, 3 * one);
  EXPECT_EQ(store.size(), 1u);
  store.set_limits(0, 3 * one);
  EXPECT_EQ(store.size(), 0u);
  EXPECT_FALSE(store.put("z", entry(1)));
}

TEST(ResponseStore, ReadersKeepTheirCopyThroughAnEviction) {
  ResponseStore store(1, size_t{1} << 20);
  store.put("a", entry(5));
  auto held = store.get("a");
  store.put("b", entry(5));
  EXPECT_EQ(store.get("a"), nullptr);
  EXPECT_EQ(held->conversation, "xxxxx");
}

std::string param_of(const ojson& body) {
  try {
    parse_responses_request(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "(no error)";
}

TEST(ResponsesSchema, ErrorsNameTheField) {
  const ojson image = ojson::parse(R"({"input": [{"role": "user", "content": [
      {"type": "input_text", "text": "what is this?"},
      {"type": "input_image", "image_url": "https://example.com/a.png"}]}]})");
  EXPECT_EQ(param_of(image), "input[0].content[1].type");
  EXPECT_EQ(param_of({{"input", 3}}), "input");
  EXPECT_EQ(param_of({{"model", "m"}}), "input");
  EXPECT_EQ(param_of({{"input", ojson::array()}}), "input");
  EXPECT_EQ(param_of({{"input", {{{"role", "bot"}, {"content", "x"}}}}}), "input[0].role");
  EXPECT_EQ(param_of({{"input", {{{"type", "function_call"}, {"name", "f"}}}}}),
            "input[0].call_id");
  EXPECT_EQ(param_of({{"input", {{{"type", "web_search_call"}}}}}), "input[0].type");
  EXPECT_EQ(param_of({{"input", {{{"type", "item_reference"}, {"id", "msg_1"}}}}}),
            "input[0].type");
  EXPECT_EQ(param_of({{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}), "tools[0].type");
  EXPECT_EQ(param_of({{"input", "x"}, {"tools", {{{"type", "function"}}}}}), "tools[0].name");
  EXPECT_EQ(param_of({{"input", "x"}, {"text", {{"format", {{"type", "json_schema"}}}}}}),
            "text.format");
  EXPECT_EQ(param_of({{"input", "x"}, {"tool_choice", "required"}}), "tool_choice");
  EXPECT_EQ(param_of({{"input", "x"}, {"reasoning", {{"effort", "max"}}}}), "reasoning.effort");
  EXPECT_EQ(param_of({{"input", "x"}, {"truncation", "sometimes"}}), "truncation");
  EXPECT_EQ(param_of({{"input", "x"}, {"background", true}}), "background");
  EXPECT_EQ(param_of({{"input", "x"}, {"max_output_tokens", 0}}), "max_output_tokens");
  ojson many = ojson::object();
  for (int i = 0; i < 17; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_EQ(param_of({{"input", "x"}, {"metadata", many}}), "metadata");
  const std::string deep = std::string(300, '[') + std::string(300, ']');
  EXPECT_EQ(
      param_of(
          {{"input",
            {{{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", deep}}}}}),
      "input[0].arguments");
  // Unknown fields are ignored, as on the other routes.
  EXPECT_EQ(param_of({{"input", "x"}, {"service_tier", "auto"}, {"include", {"a"}}}), "(no error)");
}

TEST(ResponsesSchema, ItemsBecomeTemplateMessages) {
  const ResponsesRequest r = parse_responses_request(ojson::parse(R"({
    "instructions": "Be brief.",
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "reasoning": {"effort": "none"},
    "input": [
      {"role": "developer", "content": "Use metric units."},
      {"role": "user", "content": [{"type": "input_text", "text": "Weather"},
                                   {"type": "input_text", "text": "in Paris?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [],
       "content": [{"type": "reasoning_text", "text": "call the tool"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather",
       "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "oops"},
      {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "18 C."}]},
      {"type": "message", "role": "assistant", "content": "And sunny."},
      {"role": "user", "content": "Thanks"}]})"));
  EXPECT_EQ(r.chat.tool_choice, "named");
  EXPECT_EQ(r.chat.tool_choice_name, "get_weather");
  EXPECT_EQ(r.chat.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.chat.template_kwargs["enable_thinking"], false);
  EXPECT_EQ(r.echo["tools"][0]["strict"], true);
  const ojson m = responses_messages(r.input, r.instructions);
  ASSERT_EQ(m.size(), 8u) << m.dump();
  EXPECT_EQ(m[0], ojson({{"role", "system"}, {"content", "Be brief."}}));
  EXPECT_EQ(m[1], ojson({{"role", "system"}, {"content", "Use metric units."}}));
  EXPECT_EQ(m[2]["content"], "Weather\nin Paris?");
  EXPECT_EQ(m[3]["role"], "assistant");
  EXPECT_EQ(m[3]["reasoning_content"], "call the tool");
  ASSERT_EQ(m[3]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m[3]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(m[3]["tool_calls"][1]["function"]["arguments"], "oops");
  EXPECT_EQ(m[4], ojson({{"role", "tool"}, {"content", "18 C"}, {"tool_call_id", "call_1"}}));
  // Two assistant messages in a row stay two turns.
  EXPECT_EQ(m[5]["content"], "18 C.");
  EXPECT_EQ(m[6]["content"], "And sunny.");
  EXPECT_EQ(m[7], ojson({{"role", "user"}, {"content", "Thanks"}}));
  EXPECT_EQ(param_of({{"input", "x"}}), "(no error)");
}

class ResponsesPrompt : public ::testing::Test {
 protected:
  void SetUp() override {
    auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(testing::qwen3_tokenizer_dir()));
    model_ =
        *make_served_model(std::make_shared<Engine>(
                               testing::make_scripted_model(*tok, testing::default_scripts()), tok,
                               ModelConfig::from_json({{"model_type", "qwen3"}}), EngineOptions{}),
                           "scripted");
    state_.ready = true;
  }
  std::string prompt(ResponsesRequest r, const ojson& items) {
    r.chat.messages = responses_messages(items, r.instructions);
    return prepare_chat(state_, model_, r.chat, false).prompt_text;
  }
  ServerState state_;
  ServedModel model_;
};

// What previous_response_id relies on: the follow-up's prompt is the previous prompt, then the
// previous output as the model wrote it, then the new turn.
TEST_F(ResponsesPrompt, AFollowUpExtendsThePreviousPromptAndOutput) {
  const ResponsesRequest first =
      parse_responses_request({{"input", "Count to ten."}, {"instructions", "Be exact."}});
  const std::string p1 = prompt(first, first.input);
  ResponsesOutput out(nullptr);
  out.add({"", "one, two, three.", {}});
  out.finish("completed");
  ojson items = first.input;
  for (const auto& item : out.items()) items.push_back(item);
  const ResponsesRequest next =
      parse_responses_request({{"input", "Again."}, {"instructions", "Be exact."}});
  for (const auto& item : next.input) items.push_back(item);
  const std::string p2 = prompt(next, items);
  EXPECT_EQ(p2.substr(0, p1.size() + 16), p1 + "one, two, three.") << p2;
  EXPECT_EQ(p2.substr(p1.size() + 16, 10), "<|im_end|>");

  // A function call and its output continue the same way.
  ResponsesOutput call(nullptr);
  call.add({"", "", {{"get_weather", R"({"city": "Paris"})"}}});
  call.finish("completed");
  ASSERT_EQ(call.items().size(), 1u);
  EXPECT_EQ(call.items()[0]["type"], "function_call");
  ojson with_call = first.input;
  with_call.push_back(call.items()[0]);
  with_call.push_back({{"type", "function_call_output"},
                       {"call_id", call.items()[0]["call_id"]},
                       {"output", "sunny"}});
  const std::string p3 = prompt(first, with_call);
  EXPECT_EQ(p3.substr(0, p1.size()), p1);
  EXPECT_NE(
      p3.find("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"),
      std::string::npos)
      << p3;
  EXPECT_NE(p3.find("<tool_response>\nsunny\n</tool_response>"), std::string::npos) << p3;
}

std::vector<ojson> parse_events(const std::string& sse) {
  std::vector<ojson> events;
  size_t at = 0;
  while (at < sse.size()) {
    const size_t end = sse.find("\n\n", at);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    const std::string block = sse.substr(at, end - at);
    at = end + 2;
    const size_t nl = block.find('\n');
    EXPECT_EQ(block.rfind("event: ", 0), 0u) << block;
    EXPECT_EQ(block.compare(nl + 1, 6, "data: "), 0) << block;
    ojson data = ojson::parse(block.substr(nl + 7));
    EXPECT_EQ(block.substr(7, nl - 7), data["type"].get<std::string>());
    events.push_back(std::move(data));
  }
  return events;
}

TEST(ResponsesOutputEvents, ReasoningTextAndCallsInOrder) {
  std::string sse;
  ResponsesOutput out(&sse);
  out.add({"Two plus ", "", {}});
  out.add({"two.", "", {}});
  out.add({"", "\n", {}});  // space before any text is held back until text comes
  out.add({"", "The \"answer\"\n is 4.", {}});
  out.add({"", "\n", {{"f", R"({"a": 1})"}}});
  out.add({"", "\n\n", {{"g", "{}"}}});  // space between calls makes no message
  out.finish("completed");
  const auto events = parse_events(sse);
  std::vector<std::string> types;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], i);
    types.push_back(events[i]["type"].get<std::string>());
  }
  const std::vector<std::string> expected = {"response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.delta",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done"};
  EXPECT_EQ(types, expected);
  EXPECT_EQ(out.next_sequence_number(), int64_t(events.size()));
  EXPECT_EQ(events[4]["text"], "Two plus two.");
  EXPECT_EQ(events[7]["item"]["content"], ojson::array());  // parts come in their own events
  EXPECT_EQ(events[7]["output_index"], 1);
  EXPECT_EQ(events[9]["delta"], "\n");
  EXPECT_EQ(events[10]["delta"], "The \"answer\"\n is 4.");
  EXPECT_EQ(events[10]["logprobs"], ojson::array());
  EXPECT_EQ(events[12]["text"], "\nThe \"answer\"\n is 4.\n");
  EXPECT_EQ(events[15]["item"]["arguments"], "");
  EXPECT_EQ(events[16]["delta"], R"({"a": 1})");
  EXPECT_EQ(events[17]["name"], "f");
  const ojson& items = out.items();
  ASSERT_EQ(items.size(), 4u);
  EXPECT_EQ(items[0]["content"][0]["text"], "Two plus two.");
  EXPECT_EQ(items[1]["content"][0]["text"], "\nThe \"answer\"\n is 4.\n");
  EXPECT_EQ(items[2]["name"], "f");
  EXPECT_EQ(items[2]["arguments"], R"({"a": 1})");
  EXPECT_EQ(items[3]["name"], "g");
  EXPECT_EQ(items[3]["status"], "completed");
  EXPECT_TRUE(out.has_reasoning());
  for (const auto& e : events) {
    if (!e.contains("output_index")) continue;
    const ojson& item = items[e["output_index"].get<size_t>()];
    EXPECT_EQ(e.contains("item_id") ? e["item_id"] : e["item"]["id"], item["id"]);
  }
}

TEST(ResponsesOutputEvents, EmptyAndCutShortOutputs) {
  ResponsesOutput none(nullptr);
  none.add({"", " \n", {}});
  none.finish("completed");
  ASSERT_EQ(none.items().size(), 1u);  // an empty message, so output_text is ""
  EXPECT_EQ(none.items()[0]["content"][0]["text"], "");
  ResponsesOutput cut(nullptr);
  cut.add({"still thinking", "", {}});
  cut.finish("incomplete");
  ASSERT_EQ(cut.items().size(), 1u);
  EXPECT_EQ(cut.items()[0]["type"], "reasoning");
  EXPECT_EQ(cut.items()[0]["status"], "incomplete");
}

}  // namespace
}  // namespace hearth::server
