// OpenAI Responses API request → ResponsesRequest (items normalised, tools and tool_choice as
// the chat pipeline takes them), conversation items → template messages, and the output objects.
// Unknown fields are ignored, as on the other routes; fields that ask for what this server
// cannot do (images, hosted tools, structured output, background runs) are 400s that say so.
#include "server/schemas_responses.h"

#include <unordered_set>

#include "core/json_bounded.h"
#include "server/chat_pipeline.h"
#include "server/errors.h"

namespace hearth::server {

namespace {

[[noreturn]] void responses_wrong_type(const std::string& name, const char* expected,
                                       const ojson& got) {
  bad_request(name + " must be " + expected + ", got " + json_type_name(got), name);
}

// obj[key] as a string, with errors naming `path` + "." + key; nullopt when absent or null.
std::optional<std::string> responses_string(const ojson& obj, const char* key,
                                            const std::string& path, bool required = false) {
  const std::string name = path.empty() ? std::string(key) : path + "." + key;
  const ojson* v = field(obj, key);
  if (!v) {
    if (required) bad_request(name + " is required", name);
    return std::nullopt;
  }
  if (!v->is_string()) responses_wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

bool responses_is_unsupported_media(const std::string& type) {
  return type == "input_image" || type == "input_file" || type == "input_audio";
}

[[noreturn]] void responses_media_refused(const std::string& name, const std::string& type) {
  bad_request(name + ": '" + type +
                  "' content is not supported: this server's models read text only (send "
                  "input_text)",
              name + ".type");
}

// A message's content: a string, or a list of text parts. Returns normalised parts.
ojson responses_content_parts(const ojson& content, const std::string& role,
                              const std::string& name) {
  const char* text_type = role == "assistant" ? "output_text" : "input_text";
  if (content.is_string()) return ojson::array({{{"type", text_type}, {"text", content}}});
  if (!content.is_array())
    responses_wrong_type(name, "a string or an array of content parts", content);
  ojson parts = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string pname = name + "[" + std::to_string(i) + "]";
    const ojson& p = content[i];
    if (!p.is_object()) responses_wrong_type(pname, "an object", p);
    const std::string type = *responses_string(p, "type", pname, true);
    if (responses_is_unsupported_media(type)) responses_media_refused(pname, type);
    if (type == "refusal") {
      parts.push_back(
          {{"type", "output_text"}, {"text", *responses_string(p, "refusal", pname, true)}});
    } else if (type == "input_text" || type == "output_text" || type == "text") {
      parts.push_back({{"type", type == "text" ? text_type : type.c_str()},
                       {"text", *responses_string(p, "text", pname, true)}});
    } else {
      bad_request(
          pname + ": unknown content part type '" + type + "' (expected input_text or output_text)",
          pname + ".type");
    }
  }
  return parts;
}

std::string responses_parts_text(const ojson& parts) {
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) text += "\n";
    text += parts[i].value("text", "");
  }
  return text;
}

// The item with `id` after its type (where OpenAI's items have it).
ojson responses_with_id(ojson item, const std::string& id) {
  ojson out = {{"type", item["type"]}, {"id", id}};
  out.update(item);
  return out;
}

// OpenAI's id prefixes: msg_, fc_ (function calls), fco_ (their outputs), rs_ (reasoning).
const char* responses_id_prefix(const ojson& item) {
  const std::string type = item.value("type", "");
  if (type == "function_call") return "fc_";
  if (type == "function_call_output") return "fco_";
  if (type == "reasoning") return "rs_";
  return "msg_";
}

ojson responses_normalise_item(const ojson& item, const std::string& name) {
  if (!item.is_object()) responses_wrong_type(name, "an object", item);
  const std::string type = responses_string(item, "type", name).value_or("message");
  if (type == "message") {
    const std::string role = *responses_string(item, "role", name, true);
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      bad_request(name + ".role: unknown role '" + role +
                      "' (expected user, assistant, system or developer)",
                  name + ".role");
    const ojson* content = field(item, "content");
    if (!content) bad_request(name + ".content is required", name + ".content");
    return {{"type", "message"},
            {"role", role},
            {"content", responses_content_parts(*content, role, name + ".content")}};
  }
  if (type == "function_call") {
    const std::string call_id = *responses_string(item, "call_id", name, true);
    const std::string fname = *responses_string(item, "name", name, true);
    const ojson* a = field(item, "arguments");
    std::string arguments = "{}";
    if (a && a->is_string()) {
      arguments = a->get<std::string>();
      ojson parsed;
      if (parse_json_bounded(arguments, parsed) == JsonParseStatus::TooDeep)
        bad_request(
            fmt::format("{}.arguments nests JSON deeper than {} levels", name, kMaxJsonDepth),
            name + ".arguments");
    } else if (a && a->is_object()) {
      arguments = a->dump();
    } else if (a) {
      responses_wrong_type(name + ".arguments", "a string (JSON)", *a);
    }
    return {
        {"type", "function_call"}, {"call_id", call_id}, {"name", fname}, {"arguments", arguments}};
  }
  if (type == "function_call_output") {
    const std::string call_id = *responses_string(item, "call_id", name, true);
    const ojson* out = field(item, "output");
    if (!out) bad_request(name + ".output is required", name + ".output");
    const std::string text =
        out->is_string()
            ? out->get<std::string>()
            : responses_parts_text(responses_content_parts(*out, "user", name + ".output"));
    return {{"type", "function_call_output"}, {"call_id", call_id}, {"output", text}};
  }
  if (type == "reasoning") {
    // The text a template can show again: the reasoning itself, else its summary.
    // encrypted_content is opaque (another server's) and is dropped.
    std::string text;
    for (const char* key : {"content", "summary"}) {
      const ojson* list = field(item, key);
      if (!list) continue;
      const std::string lname = name + "." + key;
      if (!list->is_array()) responses_wrong_type(lname, "an array", *list);
      std::string joined;
      for (size_t i = 0; i < list->size(); ++i) {
        const std::string pname = lname + "[" + std::to_string(i) + "]";
        if (!(*list)[i].is_object()) responses_wrong_type(pname, "an object", (*list)[i]);
        if (!joined.empty()) joined += "\n";
        joined += responses_string((*list)[i], "text", pname, true).value_or("");
      }
      if (text.empty()) text = joined;
    }
    return {{"type", "reasoning"},
            {"summary", ojson::array()},
            {"content", ojson::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  }
  if (type == "item_reference")
    bad_request(name +
                    ": item references are not supported; send the item itself, or continue "
                    "a stored response with previous_response_id",
                name + ".type");
  bad_request(name + ".type: '" + type +
                  "' items are not supported (expected message, function_call, "
                  "function_call_output or reasoning)",
              name + ".type");
}

// Responses-style function tools → chat-style tools (what the template and parser take).
ojson responses_tools(const ojson& tools, ojson& echo) {
  if (!tools.is_array()) responses_wrong_type("tools", "an array", tools);
  ojson chat_tools = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string name = "tools[" + std::to_string(i) + "]";
    const ojson& t = tools[i];
    if (!t.is_object()) responses_wrong_type(name, "an object", t);
    const std::string type = *responses_string(t, "type", name, true);
    if (type != "function")
      bad_request(name + ".type: '" + type +
                      "' tools are not supported (only function tools: {\"type\": \"function\", "
                      "\"name\", \"parameters\"})",
                  name + ".type");
    const std::string fname = *responses_string(t, "name", name, true);
    ojson fn = {{"name", fname}};
    const auto description = responses_string(t, "description", name);
    if (description) fn["description"] = *description;
    const ojson* params = field(t, "parameters");
    if (params && !params->is_object())
      responses_wrong_type(name + ".parameters", "an object (a JSON schema)", *params);
    if (params) fn["parameters"] = *params;
    const ojson* strict = field(t, "strict");
    if (strict && !strict->is_boolean())
      responses_wrong_type(name + ".strict", "a boolean", *strict);
    chat_tools.push_back({{"type", "function"}, {"function", fn}});
    echo.push_back({{"type", "function"},
                    {"name", fname},
                    {"description", description ? ojson(*description) : ojson()},
                    {"parameters", params ? *params : ojson()},
                    {"strict", strict ? *strict : ojson(true)}});
  }
  return chat_tools;
}

void responses_tool_choice(const ojson& tc, ChatRequest& r) {
  if (tc.is_string()) {
    r.tool_choice = tc.get<std::string>();
    if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
      bad_request("tool_choice must be auto, none, required or {\"type\": \"function\", \"name\"}",
                  "tool_choice");
  } else if (tc.is_object()) {
    const std::string type = *responses_string(tc, "type", "tool_choice", true);
    if (type != "function")
      bad_request("tool_choice.type: '" + type + "' is not supported (only function tools)",
                  "tool_choice.type");
    r.tool_choice = "named";
    r.tool_choice_name = *responses_string(tc, "name", "tool_choice", true);
  } else {
    responses_wrong_type("tool_choice", "a string or an object", tc);
  }
  check_tool_choice(r);
}

void responses_metadata(const ojson& m) {
  // OpenAI's limits: 16 pairs, keys up to 64 characters, string values up to 512.
  if (!m.is_object()) responses_wrong_type("metadata", "an object", m);
  if (m.size() > 16)
    bad_request(fmt::format("metadata: at most 16 keys, got {}", m.size()), "metadata");
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string name = "metadata." + it.key();
    if (it.key().size() > 64) bad_request("metadata: keys are at most 64 characters", "metadata");
    if (!it->is_string()) responses_wrong_type(name, "a string", *it);
    if (it->get<std::string>().size() > 512)
      bad_request(name + ": values are at most 512 characters", name);
  }
}

// text.format: plain text only (no constrained decoding yet).
ojson responses_text_config(const ojson& text) {
  if (!text.is_object()) responses_wrong_type("text", "an object", text);
  ojson out = {{"format", {{"type", "text"}}}};
  if (const ojson* format = field(text, "format")) {
    if (!format->is_object()) responses_wrong_type("text.format", "an object", *format);
    const std::string type = *responses_string(*format, "type", "text.format", true);
    if (type != "text")
      bad_request("text.format '" + type +
                      "' is not supported yet (no constrained decoding); use {\"type\": "
                      "\"text\"} and describe the format in the instructions",
                  "text.format");
  }
  if (auto verbosity = responses_string(text, "verbosity", "text")) {
    if (*verbosity != "low" && *verbosity != "medium" && *verbosity != "high")
      bad_request("text.verbosity must be low, medium or high", "text.verbosity");
    out["verbosity"] = *verbosity;
  }
  return out;
}

}  // namespace

ResponsesRequest parse_responses_request(const ojson& body) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  ResponsesRequest r;
  ChatRequest& chat = r.chat;
  ojson& echo = r.echo;

  if (field(body, "background") && get_bool(body, "background").value_or(false))
    bad_request("background responses are not supported (use stream: true)", "background");
  if (field(body, "conversation"))
    bad_request(
        "conversation is not supported; continue a stored response with "
        "previous_response_id",
        "conversation");
  if (field(body, "prompt"))
    bad_request(
        "prompt (reusable prompt templates) is not supported; send instructions and "
        "input",
        "prompt");

  const ojson* input = field(body, "input");
  if (!input) bad_request("input is required", "input");
  if (input->is_string()) {
    r.input =
        ojson::array({{{"type", "message"},
                       {"role", "user"},
                       {"content", ojson::array({{{"type", "input_text"}, {"text", *input}}})}}});
  } else if (input->is_array()) {
    if (input->empty()) bad_request("input must not be empty", "input");
    std::unordered_set<std::string> ids;
    for (size_t i = 0; i < input->size(); ++i) {
      const std::string name = "input[" + std::to_string(i) + "]";
      ojson item = responses_normalise_item((*input)[i], name);
      // An item's own id is kept (it names the item in GET .../input_items); as on OpenAI, two
      // items with one id are refused, so an id is a cursor into the list.
      if (auto id = responses_string((*input)[i], "id", name)) {
        if (id->empty()) bad_request(name + ".id must not be empty", name + ".id");
        if (!ids.insert(*id).second)
          bad_request(name + ".id: duplicate item id '" + *id + "'", name + ".id");
        item = responses_with_id(std::move(item), *id);
      }
      r.input.push_back(std::move(item));
    }
  } else {
    responses_wrong_type("input", "a string or an array of input items", *input);
  }
  for (ojson& item : r.input)
    if (!item.contains("id")) item = responses_with_id(item, random_id(responses_id_prefix(item)));

  if (const ojson* ins = field(body, "instructions")) {
    if (!ins->is_string()) responses_wrong_type("instructions", "a string", *ins);
    if (!ins->get<std::string>().empty()) r.instructions = ins->get<std::string>();
  }
  r.previous_response_id = get_string(body, "previous_response_id");
  r.store = get_bool(body, "store").value_or(true);
  chat.stream = get_bool(body, "stream").value_or(false);
  chat.max_tokens = get_int(body, "max_output_tokens", 1, INT32_MAX);
  chat.sampling = parse_sampling(body);
  chat.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);

  echo["tools"] = ojson::array();
  if (const ojson* tools = field(body, "tools")) {
    ojson chat_tools = responses_tools(*tools, echo["tools"]);
    if (!chat_tools.empty()) chat.tools = std::move(chat_tools);
  }
  echo["tool_choice"] = "auto";
  if (const ojson* tc = field(body, "tool_choice")) {
    responses_tool_choice(*tc, chat);
    echo["tool_choice"] = *tc;
  }

  if (const ojson* kw = field(body, "chat_template_kwargs")) {  // hearth extension, as on chat
    if (!kw->is_object()) responses_wrong_type("chat_template_kwargs", "an object", *kw);
    chat.template_kwargs = *kw;
  }
  echo["reasoning"] = {{"effort", nullptr}, {"summary", nullptr}};
  if (const ojson* reasoning = field(body, "reasoning")) {
    if (!reasoning->is_object()) responses_wrong_type("reasoning", "an object", *reasoning);
    if (auto effort = responses_string(*reasoning, "effort", "reasoning")) {
      if (*effort != "none" && *effort != "minimal" && *effort != "low" && *effort != "medium" &&
          *effort != "high" && *effort != "xhigh")
        bad_request("reasoning.effort must be none, minimal, low, medium, high or xhigh",
                    "reasoning.effort");
      // The template's own switches: reasoning_effort (gpt-oss style) and enable_thinking
      // (Qwen3 style); chat_template_kwargs, when given, win.
      if (!chat.template_kwargs.contains("reasoning_effort"))
        chat.template_kwargs["reasoning_effort"] = *effort;
      if (!chat.template_kwargs.contains("enable_thinking"))
        chat.template_kwargs["enable_thinking"] = *effort != "none";
      echo["reasoning"]["effort"] = *effort;
    }
    if (auto summary = responses_string(*reasoning, "summary", "reasoning"))
      echo["reasoning"]["summary"] = *summary;
  }

  echo["text"] = {{"format", {{"type", "text"}}}};
  if (const ojson* text = field(body, "text")) echo["text"] = responses_text_config(*text);

  echo["metadata"] = ojson::object();
  if (const ojson* metadata = field(body, "metadata")) {
    responses_metadata(*metadata);
    echo["metadata"] = *metadata;
  }
  if (auto truncation = get_string(body, "truncation")) {
    if (*truncation != "auto" && *truncation != "disabled")
      bad_request("truncation must be auto or disabled", "truncation");
    r.truncation_auto = *truncation == "auto";
  }
  echo["instructions"] = r.instructions ? ojson(*r.instructions) : ojson();
  echo["max_output_tokens"] = chat.max_tokens ? ojson(*chat.max_tokens) : ojson();
  echo["parallel_tool_calls"] = chat.parallel_tool_calls;
  echo["previous_response_id"] = r.previous_response_id ? ojson(*r.previous_response_id) : ojson();
  echo["store"] = r.store;
  echo["truncation"] = r.truncation_auto ? "auto" : "disabled";
  // As given (a float would print 0.7 as 0.699999988); the route fills in the defaults.
  for (const char* key : {"temperature", "top_p"})
    echo[key] = field(body, key) ? body[key] : ojson();
  if (auto user = get_string(body, "user")) echo["user"] = *user;
  return r;
}

ojson responses_messages(const ojson& items, const std::optional<std::string>& instructions) {
  ojson messages = ojson::array();
  if (instructions) messages.push_back({{"role", "system"}, {"content", *instructions}});
  // The assistant turn being gathered: reasoning, then text, then tool calls.
  ojson turn;
  bool turn_has_text = false;
  auto flush = [&] {
    if (!turn.is_null()) messages.push_back(std::move(turn));
    turn = nullptr;
    turn_has_text = false;
  };
  auto open_turn = [&] {
    if (turn.is_null()) turn = {{"role", "assistant"}, {"content", ""}};
  };
  for (const ojson& item : items) {
    const std::string type = item.value("type", "message");
    if (type == "message") {
      std::string role = item.value("role", "user");
      const std::string text = responses_parts_text(item.value("content", ojson::array()));
      if (role == "assistant") {
        if (turn_has_text || (!turn.is_null() && turn.contains("tool_calls"))) flush();
        open_turn();
        turn["content"] = text;
        turn_has_text = true;
        continue;
      }
      flush();
      if (role == "developer") role = "system";  // templates know system, not developer
      messages.push_back({{"role", role}, {"content", text}});
    } else if (type == "reasoning") {
      if (turn_has_text || (!turn.is_null() && turn.contains("tool_calls"))) flush();
      open_turn();
      std::string text;
      for (const auto& part : item.value("content", ojson::array())) text += part.value("text", "");
      const std::string before = turn.value("reasoning_content", "");
      turn["reasoning_content"] = before.empty() ? text : before + "\n" + text;
    } else if (type == "function_call") {
      open_turn();
      // Templates expect the arguments as a mapping (transformers' convention); a string that
      // is not a JSON object is passed as it is.
      const std::string args = item.value("arguments", "{}");
      ojson parsed = parse_json_or_discarded<ojson>(args);
      if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
      turn["tool_calls"].push_back({{"id", item.value("call_id", "")},
                                    {"type", "function"},
                                    {"function",
                                     {{"name", item.value("name", "")},
                                      {"arguments", parsed.is_object() ? parsed : ojson(args)}}}});
    } else if (type == "function_call_output") {
      flush();
      messages.push_back({{"role", "tool"},
                          {"content", item.value("output", "")},
                          {"tool_call_id", item.value("call_id", "")}});
    }
  }
  flush();
  return messages;
}

ojson responses_output_text_part(const std::string& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", ojson::array()},
          {"logprobs", ojson::array()}};
}

ojson responses_reasoning_item(const std::string& id, const std::string& text, const char* status) {
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", ojson::array()},
          {"content", ojson::array({{{"type", "reasoning_text"}, {"text", text}}})},
          {"status", status}};
}

ojson responses_message_item(const std::string& id, const std::string& text, const char* status) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", ojson::array({responses_output_text_part(text)})}};
}

ojson responses_function_call_item(const std::string& id, const std::string& call_id,
                                   const chat::ToolCall& call, const char* status) {
  return {{"type", "function_call"},     {"id", id},
          {"call_id", call_id},          {"name", call.name},
          {"arguments", call.arguments}, {"status", status}};
}

ojson responses_usage(const GenerationUsage& u, int64_t reasoning_tokens) {
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
          {"output_tokens", u.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

ojson responses_object(const ResponsesRequest& r, const std::string& id, int64_t created_at,
                       const std::string& model, const std::string& status, ojson output,
                       ojson usage) {
  ojson o = {{"id", id},
             {"object", "response"},
             {"created_at", created_at},
             {"status", status},
             {"background", false},
             {"error", nullptr},
             {"incomplete_details", nullptr},
             {"model", model},
             {"output", std::move(output)},
             {"usage", std::move(usage)}};
  // output_text is a property the SDKs compute on responses.create; their stream helpers do not,
  // so the server sends it too (the message items' text, concatenated).
  std::string text;
  for (const ojson& item : o["output"])
    if (item.value("type", "") == "message")
      for (const ojson& part : item.value("content", ojson::array()))
        if (part.value("type", "") == "output_text") text += part.value("text", "");
  o["output_text"] = std::move(text);
  for (auto it = r.echo.begin(); it != r.echo.end(); ++it) o[it.key()] = it.value();
  if (status == "incomplete") o["incomplete_details"] = {{"reason", "max_output_tokens"}};
  return o;
}

}  // namespace hearth::server
