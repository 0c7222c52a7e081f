// OpenAI request schemas (chat completions, completions) and the field helpers every schema
// uses. Messages are normalised for chat templates here, once, so templates see one shape.
#include "server/schemas.h"

#include <cmath>

#include "core/json_bounded.h"
#include "server/errors.h"

namespace hearth::server {

void check_tool_choice(const ChatRequest& r) {
  if ((r.tool_choice == "required" || r.tool_choice == "named") && r.tools.is_null())
    bad_request("tool_choice '" + r.tool_choice + "' needs tools", "tool_choice");
  if (r.tool_choice == "named") {
    bool found = false;
    for (const auto& t : r.tools) found |= t["function"].value("name", "") == r.tool_choice_name;
    if (!found)
      bad_request("tool_choice names '" + r.tool_choice_name + "', which is not in tools",
                  "tool_choice");
  }
}

const char* json_type_name(const ojson& j) {
  switch (j.type()) {
    case ojson::value_t::null:
      return "null";
    case ojson::value_t::boolean:
      return "a boolean";
    case ojson::value_t::string:
      return "a string";
    case ojson::value_t::array:
      return "an array";
    case ojson::value_t::object:
      return "an object";
    case ojson::value_t::binary:
    case ojson::value_t::discarded:
      return "invalid";
    default:
      return "a number";
  }
}

namespace {

[[noreturn]] void wrong_type(const std::string& name, const char* expected, const ojson& got) {
  bad_request(name + " must be " + expected + ", got " + json_type_name(got), name);
}

// Text of an OpenAI content value: a string, or a list of {"type": "text", "text": ...} parts.
std::string content_text(const ojson& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong_type(name, "a string or an array of content parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string pname = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(pname, "an object", part);
    const auto type = get_string(part, "type");
    if (!type) bad_request(pname + ".type is required", pname + ".type");
    if (*type != "text")
      bad_request(pname + ": content parts of type '" + *type + "' are not supported (text only)",
                  pname + ".type");
    const auto t = get_string(part, "text");
    if (!t) bad_request(pname + ".text is required", pname + ".text");
    if (!text.empty()) text += "\n";
    text += *t;
  }
  return text;
}

ojson parse_tool_calls(const ojson& calls, const std::string& name) {
  if (!calls.is_array()) wrong_type(name, "an array", calls);
  ojson out = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string cname = name + "[" + std::to_string(i) + "]";
    const ojson& c = calls[i];
    if (!c.is_object()) wrong_type(cname, "an object", c);
    const ojson* fn = field(c, "function");
    if (!fn || !fn->is_object()) bad_request(cname + ".function is required", cname + ".function");
    const auto fname = get_string(*fn, "name");
    if (!fname) bad_request(cname + ".function.name is required", cname + ".function.name");
    ojson args = ojson::object();
    if (const ojson* a = field(*fn, "arguments")) {
      if (a->is_string()) {
        // Templates expect a mapping (transformers' convention); keep the string if not JSON.
        ojson parsed;
        const JsonParseStatus status = parse_json_bounded(a->get<std::string>(), parsed);
        if (status == JsonParseStatus::TooDeep)
          bad_request(fmt::format("{}.function.arguments nests JSON deeper than {} levels", cname,
                                  kMaxJsonDepth),
                      cname + ".function.arguments");
        args = status == JsonParseStatus::Ok ? parsed : *a;
      } else if (a->is_object()) {
        args = *a;
      } else {
        wrong_type(cname + ".function.arguments", "a string", *a);
      }
    }
    ojson call = {{"type", "function"}, {"function", {{"name", *fname}, {"arguments", args}}}};
    if (auto id = get_string(c, "id")) call["id"] = *id;
    out.push_back(call);
  }
  return out;
}

}  // namespace

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> get_number(const ojson& obj, const char* key, double min, double max) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < min || x > max)
    bad_request(fmt::format("{} must be between {} and {}, got {}", key, min, max, x), key);
  return x;
}

std::optional<int64_t> get_int(const ojson& obj, const char* key, int64_t min, int64_t max) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) {
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
        std::fabs(v->get<double>()) < 9e15) {
      // 5.0 is an integer to JavaScript clients.
    } else {
      wrong_type(key, "an integer", *v);
    }
  }
  const int64_t x = v->is_number_integer() ? v->get<int64_t>() : int64_t(v->get<double>());
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
    bad_request(fmt::format("{} must be at most {}", key, max), key);
  if (x < min || x > max)
    bad_request(fmt::format("{} must be between {} and {}, got {}", key, min, max, x), key);
  return x;
}

std::optional<bool> get_bool(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string", *v);
  return v->get<std::string>();
}

SamplingFields parse_sampling(const ojson& body) {
  SamplingFields s;
  if (auto v = get_number(body, "temperature", 0, 100)) s.temperature = float(*v);
  if (auto v = get_number(body, "top_p", 0, 1)) {
    if (*v <= 0) bad_request("top_p must be in (0, 1], got 0", "top_p");
    s.top_p = float(*v);
  }
  if (auto v = get_int(body, "top_k", -1, 1 << 30))
    s.top_k = int(*v < 0 ? 0 : *v);  // -1: off (vLLM)
  if (auto v = get_number(body, "min_p", 0, 1)) s.min_p = float(*v);
  if (auto v = get_number(body, "presence_penalty", -2, 2)) s.presence_penalty = float(*v);
  if (auto v = get_number(body, "frequency_penalty", -2, 2)) s.frequency_penalty = float(*v);
  if (auto v = get_number(body, "repetition_penalty", 1e-3, 100)) s.repetition_penalty = float(*v);
  if (const ojson* v = field(body, "seed")) {
    if (!v->is_number_integer()) wrong_type("seed", "an integer", *v);
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
  }
  if (const ojson* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", "an object mapping token ids to biases", *lb);
    for (auto it = lb->begin(); it != lb->end(); ++it) {
      const std::string name = "logit_bias." + it.key();
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(it.key(), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != it.key().size() || id < 0 || id > INT32_MAX)
        bad_request(name + ": keys must be token ids", "logit_bias");
      if (!it->is_number()) wrong_type(name, "a number", *it);
      const double b = it->get<double>();
      if (b < -100 || b > 100) bad_request(name + " must be between -100 and 100", "logit_bias");
      s.logit_bias[int32_t(id)] = float(b);
    }
  }
  return s;
}

std::vector<std::string> parse_stop(const ojson& body, const char* key) {
  std::vector<std::string> out;
  const ojson* v = field(body, key);
  if (!v) return out;
  if (v->is_string()) {
    if (!v->get<std::string>().empty()) out.push_back(v->get<std::string>());
    return out;
  }
  if (!v->is_array()) wrong_type(key, "a string or an array of strings", *v);
  if (v->size() > 16)
    bad_request(fmt::format("{}: at most 16 stop strings, got {}", key, v->size()), key);
  for (const auto& s : *v) {
    if (!s.is_string()) wrong_type(std::string(key) + "[]", "a string", s);
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

ojson parse_function_tools(const ojson& body) {
  const ojson* tools = field(body, "tools");
  if (!tools) return nullptr;
  if (!tools->is_array()) wrong_type("tools", "an array", *tools);
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string name = "tools[" + std::to_string(i) + "]";
    const ojson& t = (*tools)[i];
    if (!t.is_object()) wrong_type(name, "an object", t);
    if (get_string(t, "type").value_or("function") != "function")
      bad_request(name + ".type must be 'function'", name + ".type");
    const ojson* fn = field(t, "function");
    if (!fn || !fn->is_object()) bad_request(name + ".function is required", name + ".function");
    if (!get_string(*fn, "name"))
      bad_request(name + ".function.name is required", name + ".function.name");
    if (const ojson* p = field(*fn, "parameters"); p && !p->is_object())
      wrong_type(name + ".function.parameters", "an object (a JSON schema)", *p);
  }
  return tools->empty() ? ojson() : *tools;
}

ChatRequest parse_openai_chat(const ojson& body) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  ChatRequest r;
  const ojson* messages = field(body, "messages");
  if (!messages) bad_request("messages is required", "messages");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) bad_request("messages must not be empty", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    const ojson& m = (*messages)[i];
    if (!m.is_object()) wrong_type(name, "an object", m);
    const ojson* role_v = field(m, "role");
    if (!role_v) bad_request(name + ".role is required", name + ".role");
    if (!role_v->is_string()) wrong_type(name + ".role", "a string", *role_v);
    std::string role = role_v->get<std::string>();
    if (role == "developer") role = "system";  // templates know system, not developer
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_request(name + ".role: unknown role '" + role +
                      "' (expected system, developer, user, assistant or tool)",
                  name + ".role");
    ojson out = {{"role", role}};
    const ojson* content = field(m, "content");
    const ojson* calls = field(m, "tool_calls");
    if (!content && !(role == "assistant" && calls))
      bad_request(name + ".content is required", name + ".content");
    out["content"] = content ? content_text(*content, name + ".content") : std::string();
    if (role == "assistant") {
      if (calls && !calls->empty())
        out["tool_calls"] = parse_tool_calls(*calls, name + ".tool_calls");
      if (auto rc = get_string(m, "reasoning_content")) out["reasoning_content"] = *rc;
    }
    if (role == "tool") {
      if (auto id = get_string(m, "tool_call_id")) out["tool_call_id"] = *id;
    }
    if (auto n = get_string(m, "name")) out["name"] = *n;
    r.messages.push_back(std::move(out));
  }

  if (auto n = get_int(body, "n", INT64_MIN, INT64_MAX); n && *n != 1)
    bad_request(fmt::format("n must be 1 (one choice per request), got {}", *n), "n");
  if (const ojson* rf = field(body, "response_format")) {
    if (!rf->is_object() || rf->value("type", "") != "text")
      bad_request("response_format is not supported yet (no constrained decoding)",
                  "response_format");
  }
  if (auto v = get_int(body, "max_completion_tokens", 1, INT32_MAX))
    r.max_tokens = *v;
  else if (auto v2 = get_int(body, "max_tokens", 1, INT32_MAX))
    r.max_tokens = *v2;
  r.sampling = parse_sampling(body);
  r.stop = parse_stop(body, "stop");
  r.stream = get_bool(body, "stream").value_or(false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    r.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  if (get_bool(body, "logprobs").value_or(false))
    r.logprobs = int(get_int(body, "top_logprobs", 0, 20).value_or(0));
  else if (get_int(body, "top_logprobs", 0, 20).value_or(0) > 0)
    bad_request("top_logprobs needs logprobs: true", "top_logprobs");
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);

  r.tools = parse_function_tools(body);
  if (const ojson* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
        bad_request("tool_choice must be auto, none, required or {\"type\": \"function\", ...}",
                    "tool_choice");
    } else if (tc->is_object()) {
      const ojson* fn = field(*tc, "function");
      auto fname = fn && fn->is_object() ? get_string(*fn, "name") : std::nullopt;
      if (!fname) bad_request("tool_choice.function.name is required", "tool_choice");
      r.tool_choice = "named";
      r.tool_choice_name = *fname;
    } else {
      wrong_type("tool_choice", "a string or an object", *tc);
    }
    check_tool_choice(r);
  }
  r.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  if (const ojson* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) wrong_type("chat_template_kwargs", "an object", *kw);
    r.template_kwargs = *kw;
  }
  if (auto effort = get_string(body, "reasoning_effort")) {
    if (*effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" &&
        *effort != "high")
      bad_request("reasoning_effort must be none, minimal, low, medium or high",
                  "reasoning_effort");
    r.template_kwargs["reasoning_effort"] = *effort;
    if (*effort == "none" && !r.template_kwargs.contains("enable_thinking"))
      r.template_kwargs["enable_thinking"] = false;
  }
  return r;
}

CompletionRequest parse_openai_completion(const ojson& body) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  CompletionRequest r;
  const ojson* prompt = field(body, "prompt");
  if (!prompt) bad_request("prompt is required", "prompt");
  if (prompt->is_string()) {
    r.prompt = prompt->get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    r.prompt = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
    std::vector<int32_t> ids;
    for (const auto& t : *prompt) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        bad_request("prompt: token ids must be non-negative integers", "prompt");
      ids.push_back(int32_t(t.get<int64_t>()));
    }
    r.prompt_tokens = std::move(ids);
  } else if (prompt->is_array() && prompt->size() > 1) {
    bad_request("prompt: one prompt per request (batches of prompts are not supported)", "prompt");
  } else {
    wrong_type("prompt", "a string or an array of token ids", *prompt);
  }
  if (r.prompt.empty() && !r.prompt_tokens) bad_request("prompt must not be empty", "prompt");
  if (auto n = get_int(body, "n", INT64_MIN, INT64_MAX); n && *n != 1)
    bad_request(fmt::format("n must be 1 (one choice per request), got {}", *n), "n");
  if (auto n = get_int(body, "best_of", INT64_MIN, INT64_MAX); n && *n != 1)
    bad_request("best_of must be 1", "best_of");
  if (field(body, "suffix")) bad_request("suffix is not supported", "suffix");
  if (field(body, "response_format"))
    bad_request("response_format is not supported yet", "response_format");
  r.max_tokens = get_int(body, "max_tokens", 0, INT32_MAX);
  if (!r.max_tokens) r.max_tokens = 16;  // OpenAI's default for completions
  r.sampling = parse_sampling(body);
  r.stop = parse_stop(body, "stop");
  r.stream = get_bool(body, "stream").value_or(false);
  if (const ojson* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    r.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  if (auto lp = get_int(body, "logprobs", 0, 20)) r.logprobs = int(*lp);
  r.echo = get_bool(body, "echo").value_or(false);
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  return r;
}

}  // namespace hearth::server
