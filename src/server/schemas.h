// Request schemas: the OpenAI (chat completions, completions) and Anthropic (messages) request
// bodies, checked field by field and turned into one internal ChatRequest whose messages are what
// chat templates expect (HF message dicts: role, content string, tool_calls with object
// arguments, reasoning_content). Every wrong type, range or shape is an ApiError 400 naming the
// field ("messages[2].role"); unknown fields are ignored, as the SDKs send extras.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampler.h"

namespace hearth::server {

using ojson = nlohmann::ordered_json;

// "a string", "an array", ... for messages naming what a field holds.
const char* json_type_name(const ojson& j);
// The field, or null when absent or JSON null.
const ojson* field(const ojson& obj, const char* key);
std::optional<double> get_number(const ojson& obj, const char* key, double min, double max);
std::optional<int64_t> get_int(const ojson& obj, const char* key, int64_t min, int64_t max);
std::optional<bool> get_bool(const ojson& obj, const char* key);
std::optional<std::string> get_string(const ojson& obj, const char* key);

// Fields the request gave override the model's generation_config.json defaults
// (SamplingOverrides::apply).
using SamplingFields = SamplingOverrides;
// temperature, top_p, top_k, min_p, seed, penalties, logit_bias (shared by every endpoint).
SamplingFields parse_sampling(const ojson& body);
// "stop" / "stop_sequences": a string or a list of strings.
std::vector<std::string> parse_stop(const ojson& body, const char* key);

struct ChatRequest {
  ojson messages = ojson::array();
  ojson tools;  // null, or OpenAI-style [{"type": "function", "function": {...}}]
  std::string tool_choice = "auto";  // auto | none | required | named
  std::string tool_choice_name;
  bool parallel_tool_calls = true;
  ojson template_kwargs = ojson::object();
  std::optional<int64_t> max_tokens;
  SamplingFields sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  int logprobs = -1;  // -1 off, else the number of top alternatives
  bool ignore_eos = false;
};

// A tool_choice of "required" or a named tool needs tools, and the named one among them (400).
void check_tool_choice(const ChatRequest& request);

// body.tools: OpenAI-style function tools (Ollama's are the same), checked; null when absent or
// empty.
ojson parse_function_tools(const ojson& body);

ChatRequest parse_openai_chat(const ojson& body);
ChatRequest parse_anthropic_messages(const ojson& body);

struct CompletionRequest {
  std::string prompt;
  std::optional<std::vector<int32_t>> prompt_tokens;  // the prompt given as token ids
  std::optional<int64_t> max_tokens;
  SamplingFields sampling;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  int logprobs = -1;
  bool echo = false;
  bool ignore_eos = false;
};
CompletionRequest parse_openai_completion(const ojson& body);

}  // namespace hearth::server
