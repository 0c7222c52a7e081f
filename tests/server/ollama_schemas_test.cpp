// Ollama request conversion (server/schemas_ollama.h): messages, tools and think into the shared
// ChatRequest, options into sampling, the fields hearth refuses (named in the 400), model names,
// the small response formats, and num_ctx as a per-request context limit.
#include <gtest/gtest.h>

#include <regex>

#include "server/chat_pipeline.h"
#include "server/errors.h"
#include "server/schemas_ollama.h"
#include "test_model.h"

namespace hearth::server {
namespace {

ojson chat_body(ojson extra = ojson::object()) {
  ojson b = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  b.update(extra);
  return b;
}

// The 400 a body gets, as (param, message).
std::pair<std::string, std::string> chat_error(const ojson& body) {
  try {
    parse_ollama_chat(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return {e.param, e.what()};
  }
  ADD_FAILURE() << "no error for " << body.dump();
  return {};
}

TEST(OllamaSchemas, MessagesBecomeTemplateMessages) {
  const ojson body = {
      {"model", "m"},
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Weather?"}, {"images", ojson::array()}},
        {{"role", "assistant"},
         {"content", ""},
         {"thinking", "Call the tool."},
         {"tool_calls",
          {{{"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
        {{"role", "tool"}, {"content", "18 C"}, {"tool_name", "get_weather"}}}},
      {"tools",
       {{{"type", "function"},
         {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}}}};
  const OllamaRequest r = parse_ollama_chat(body);
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);  // Ollama's default
  EXPECT_FALSE(r.empty);
  const ojson expected = {
      {{"role", "system"}, {"content", "Be brief."}},
      {{"role", "user"}, {"content", "Weather?"}},
      {{"role", "assistant"},
       {"content", ""},
       {"reasoning_content", "Call the tool."},
       {"tool_calls",
        {{{"type", "function"},
          {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}}}},
      {{"role", "tool"}, {"content", "18 C"}, {"name", "get_weather"}}};
  EXPECT_EQ(r.chat.messages, expected);
  ASSERT_TRUE(r.chat.tools.is_array());
  EXPECT_EQ(r.chat.tools.size(), 1u);
  EXPECT_EQ(r.chat.logprobs, -1);
  // Arguments as a JSON string (OpenAI's shape) are taken too; anything else is named.
  ojson b = body;
  b["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{\"city\": \"Rome\"}";
  EXPECT_EQ(parse_ollama_chat(b).chat.messages[2]["tool_calls"][0]["function"]["arguments"],
            ojson({{"city", "Rome"}}));
  b["messages"][2]["tool_calls"][0]["function"]["arguments"] = 3;
  EXPECT_EQ(chat_error(b).first, "messages[2].tool_calls[0].function.arguments");
}

TEST(OllamaSchemas, NoMessagesIsALoadRequest) {
  EXPECT_TRUE(parse_ollama_chat({{"model", "m"}}).empty);
  EXPECT_TRUE(parse_ollama_chat({{"model", "m"}, {"messages", ojson::array()}}).empty);
  EXPECT_FALSE(parse_ollama_chat(chat_body({{"stream", false}})).stream);
}

TEST(OllamaSchemas, UnsupportedFieldsAreNamed) {
  auto [param, message] = chat_error(
      {{"model", "m"},
       {"messages", {{{"role", "user"}, {"content", "What is this?"}, {"images", {"iVBOR"}}}}}});
  EXPECT_EQ(param, "messages[0].images");
  EXPECT_NE(message.find("images are not supported"), std::string::npos) << message;
  EXPECT_EQ(chat_error(chat_body({{"format", "json"}})).first, "format");
  EXPECT_EQ(chat_error(chat_body({{"format", {{"type", "object"}}}})).first, "format");
  EXPECT_NO_THROW(parse_ollama_chat(chat_body({{"format", ""}})));
  EXPECT_EQ(chat_error(chat_body({{"keep_alive", "five minutes"}})).first, "keep_alive");
  EXPECT_EQ(chat_error({{"messages", ojson::array()}}).first, "model");
  EXPECT_EQ(
      chat_error({{"model", "m"}, {"messages", {{{"role", "robot"}, {"content", "x"}}}}}).first,
      "messages[0].role");
  EXPECT_EQ(chat_error(chat_body({{"top_logprobs", 3}})).first, "top_logprobs");
  EXPECT_EQ(parse_ollama_chat(chat_body({{"logprobs", true}, {"top_logprobs", 3}})).chat.logprobs,
            3);
}

TEST(OllamaSchemas, OptionsBecomeSampling) {
  const OllamaRequest r = parse_ollama_chat(chat_body({{"options",
                                                        {{"temperature", 0.25},
                                                         {"top_p", 0.9},
                                                         {"top_k", 40},
                                                         {"min_p", 0.05},
                                                         {"seed", 7},
                                                         {"repeat_penalty", 1.25},
                                                         {"presence_penalty", 0.5},
                                                         {"frequency_penalty", 0.25},
                                                         {"repeat_last_n", 64},
                                                         {"stop", {"a", "b"}},
                                                         {"num_predict", 12},
                                                         {"num_ctx", 1024},
                                                         {"num_gpu", 1},
                                                         {"num_thread", 8},
                                                         {"use_mmap", true},
                                                         {"typical_p", 1.0},
                                                         {"mirostat", 0},
                                                         {"not_an_option", "x"}}}}));
  const SamplingFields& s = r.chat.sampling;
  EXPECT_EQ(s.temperature, 0.25f);
  EXPECT_EQ(s.top_p, 0.9f);
  EXPECT_EQ(s.top_k, 40);
  EXPECT_EQ(s.min_p, 0.05f);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.repetition_penalty, 1.25f);
  EXPECT_EQ(s.presence_penalty, 0.5f);
  EXPECT_EQ(s.frequency_penalty, 0.25f);
  EXPECT_EQ(s.penalty_last_n, 64);
  EXPECT_EQ(r.chat.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.num_predict, 12);
  EXPECT_EQ(r.num_ctx, 1024);
}

TEST(OllamaSchemas, OptionDefaultsOfOllamaMeanUnset) {
  const OllamaRequest r = parse_ollama_chat(
      chat_body({{"options", {{"seed", -1}, {"num_predict", -1}, {"repeat_last_n", -1}}}}));
  EXPECT_FALSE(r.chat.sampling.seed);            // random
  EXPECT_FALSE(r.num_predict);                   // until the context is full
  EXPECT_EQ(r.chat.sampling.penalty_last_n, 0);  // the whole context
  EXPECT_FALSE(r.num_ctx);
  const OllamaRequest off = parse_ollama_chat(chat_body(
      {{"options", {{"repeat_last_n", 0}, {"repeat_penalty", 1.3}, {"presence_penalty", 1}}}}));
  EXPECT_EQ(off.chat.sampling.repetition_penalty, 1.0f);  // a window of nothing penalises nothing
  EXPECT_EQ(off.chat.sampling.presence_penalty, 0.0f);
}

TEST(OllamaSchemas, OptionErrorsNameTheOption) {
  auto [param, message] = chat_error(chat_body({{"options", {{"temperature", "hot"}}}}));
  EXPECT_EQ(param, "options.temperature");
  EXPECT_EQ(message.rfind("options.temperature must be a number", 0), 0u) << message;
  EXPECT_EQ(chat_error(chat_body({{"options", {{"top_p", 2}}}})).first, "options.top_p");
  EXPECT_EQ(chat_error(chat_body({{"options", {{"typical_p", 0.5}}}})).first, "options.typical_p");
  EXPECT_EQ(chat_error(chat_body({{"options", {{"mirostat", 2}}}})).first, "options.mirostat");
  EXPECT_EQ(chat_error(chat_body({{"options", {{"tfs_z", 0.9}}}})).first, "options.tfs_z");
  EXPECT_EQ(chat_error(chat_body({{"options", {{"num_ctx", 0}}}})).first, "options.num_ctx");
  EXPECT_EQ(chat_error(chat_body({{"options", {{"stop", 3}}}})).first, "options.stop");
  EXPECT_EQ(chat_error(chat_body({{"options", "fast"}})).first, "options");
}

TEST(OllamaSchemas, ThinkBecomesTemplateKwargs) {
  EXPECT_EQ(parse_ollama_chat(chat_body({{"think", false}})).chat.template_kwargs,
            ojson({{"enable_thinking", false}}));
  EXPECT_EQ(parse_ollama_chat(chat_body({{"think", "max"}})).chat.template_kwargs,
            ojson({{"enable_thinking", true}, {"reasoning_effort", "high"}}));
  EXPECT_EQ(parse_ollama_chat(chat_body({{"think", "low"}})).chat.template_kwargs,
            ojson({{"enable_thinking", true}, {"reasoning_effort", "low"}}));
  EXPECT_TRUE(parse_ollama_chat(chat_body()).chat.template_kwargs.empty());
  EXPECT_EQ(chat_error(chat_body({{"think", "deep"}})).first, "think");
}

TEST(OllamaSchemas, GeneratePromptSystemRawContext) {
  const OllamaRequest r = parse_ollama_generate(
      {{"model", "m"}, {"prompt", "Why?"}, {"system", "Be brief."}, {"context", {1, 2, 3}}});
  EXPECT_FALSE(r.raw);
  EXPECT_EQ(r.chat.messages, ojson({{{"role", "system"}, {"content", "Be brief."}},
                                    {{"role", "user"}, {"content", "Why?"}}}));
  EXPECT_EQ(r.context, (std::vector<int32_t>{1, 2, 3}));
  const OllamaRequest raw =
      parse_ollama_generate({{"model", "m"}, {"prompt", "[INST]"}, {"raw", true}});
  EXPECT_TRUE(raw.raw);
  EXPECT_EQ(raw.prompt, "[INST]");
  EXPECT_TRUE(parse_ollama_generate({{"model", "m"}}).empty);
  auto generate_error = [](const ojson& body) {
    try {
      parse_ollama_generate(body);
    } catch (const ApiError& e) {
      return e.param;
    }
    return std::string("(none)");
  };
  EXPECT_EQ(generate_error({{"model", "m"}, {"prompt", "x"}, {"raw", true}, {"system", "s"}}),
            "raw");
  EXPECT_EQ(generate_error({{"model", "m"}, {"prompt", "x"}, {"template", "{{ .Prompt }}"}}),
            "template");
  EXPECT_EQ(generate_error({{"model", "m"}, {"prompt", "x"}, {"suffix", "end"}}), "suffix");
  EXPECT_EQ(generate_error({{"model", "m"}, {"prompt", "x"}, {"images", {"iVBOR"}}}), "images");
  EXPECT_EQ(generate_error({{"model", "m"}, {"prompt", "x"}, {"context", {1, -2}}}), "context");
  EXPECT_EQ(generate_error({{"model", "m"}, {"prompt", "x"}, {"suffix", ""}}), "(none)");
}

TEST(OllamaSchemas, KeepAliveIsGoDurationOrSeconds) {
  for (const ojson& ok : {ojson("5m"), ojson("1h30m"), ojson("-1s"), ojson("0"), ojson("1.5h"),
                          ojson("300ms"), ojson(300), ojson(-1), ojson(0.5)})
    EXPECT_TRUE(ollama_keep_alive_valid(ok)) << ok.dump();
  for (const ojson& bad : {ojson("five"), ojson("5"), ojson("-1"), ojson("1x"), ojson(""),
                           ojson("m"), ojson(true), ojson::array()})
    EXPECT_FALSE(ollama_keep_alive_valid(bad)) << bad.dump();
}

TEST(OllamaSchemas, ModelNames) {
  for (const char* name : {"scripted", "Scripted", "scripted:latest", "SCRIPTED:Latest"})
    EXPECT_TRUE(ollama_model_matches(name, "scripted")) << name;
  for (const char* name : {"scripted:7b", "other", "scripted:", ":latest", ""})
    EXPECT_FALSE(ollama_model_matches(name, "scripted")) << name;
  EXPECT_EQ(ollama_model_name("scripted"), "scripted:latest");
  EXPECT_EQ(ollama_model_name("qwen3:0.6b"), "qwen3:0.6b");
}

TEST(OllamaSchemas, ResponseFormats) {
  EXPECT_EQ(ollama_parameter_size(7'615'616'512), "7.6B");
  EXPECT_EQ(ollama_parameter_size(8'000'000'000), "8B");
  EXPECT_EQ(ollama_parameter_size(494'032'768), "494.03M");
  EXPECT_EQ(ollama_parameter_size(125'000), "125K");
  EXPECT_EQ(ollama_parameter_size(999), "999");
  EXPECT_EQ(ollama_quantization_level("BF16: 10.00 M weights, 20.00 MB, 16.00 bits/weight; "
                                      "affine 4-bit g64: 580.00 M weights, 326.00 MB, 4.50 "
                                      "bits/weight"),
            "affine 4-bit g64");
  EXPECT_EQ(ollama_quantization_level("BF16: 596.05 M weights, 1192.10 MB, 16.00 bits/weight"),
            "BF16");
  EXPECT_EQ(ollama_quantization_level(""), "unknown");
  const std::string d = ollama_digest("model\n{}");
  EXPECT_TRUE(std::regex_match(d, std::regex("[0-9a-f]{64}"))) << d;
  EXPECT_EQ(d, ollama_digest("model\n{}"));
  EXPECT_NE(d, ollama_digest("model\n{ }"));
  using std::chrono::system_clock;
  EXPECT_EQ(ollama_time(system_clock::time_point()), "1970-01-01T00:00:00.000000000Z");
  EXPECT_EQ(ollama_time(system_clock::time_point(std::chrono::seconds(1'700'000'000)) +
                        std::chrono::nanoseconds(123)),
            "2023-11-14T22:13:20.000000123Z");
  EXPECT_EQ(ollama_time_from_unix(1'700'000'000 + 86'400), "2023-11-15T22:13:20.000000000Z");
}

// num_ctx through the shared pipeline: a smaller context is enforced, a larger one clamped.
TEST(OllamaSchemas, NumCtxLimitsTheRequest) {
  auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(testing::qwen3_tokenizer_dir()));
  ServerState state;
  EngineOptions eo;
  eo.n_ctx = 256;
  const auto model = make_served_model(
      std::make_shared<Engine>(testing::make_scripted_model(*tok, {}), tok,
                               ModelConfig::from_json({{"model_type", "qwen3"}}), eo),
      "scripted");
  state.ready = true;
  const OllamaRequest r = parse_ollama_chat(chat_body());
  PreparedChat p = prepare_chat(state, *model, r.chat, /*for_generation=*/false);
  const int64_t n_prompt = int64_t(p.gen.prompt.size());
  finish_generation_request(state, *model, p.gen, std::nullopt, r.chat.sampling, 100);
  EXPECT_EQ(p.gen.max_tokens, 100 - n_prompt);
  finish_generation_request(state, *model, p.gen, std::nullopt, r.chat.sampling, 100'000);
  EXPECT_EQ(p.gen.max_tokens, 256 - n_prompt);
  try {
    finish_generation_request(state, *model, p.gen, std::nullopt, r.chat.sampling, n_prompt);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("(num_ctx) is " + std::to_string(n_prompt)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hearth::server
