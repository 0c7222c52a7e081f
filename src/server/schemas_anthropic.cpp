// Anthropic Messages request → ChatRequest. Content blocks map onto HF message dicts:
// text → content, thinking → reasoning_content, tool_use → assistant tool_calls (input as the
// arguments mapping), tool_result → a "tool" message (before the user's text in the same turn,
// which is where the results belong in the conversation). Tools become OpenAI-style function
// tools so one template path serves both APIs.
#include "server/errors.h"
#include "server/schemas.h"

namespace hearth::server {

namespace {

[[noreturn]] void wrong(const std::string& name, const std::string& expected) {
  bad_request(name + " must be " + expected, name);
}

std::string blocks_text(const ojson& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) wrong(name, "a string or an array of content blocks");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& b = content[i];
    const std::string bname = name + "[" + std::to_string(i) + "]";
    if (!b.is_object()) wrong(bname, "an object");
    const std::string type = get_string(b, "type").value_or("");
    if (type != "text")
      bad_request(bname + ": block type '" + type + "' is not supported here (text only)", bname);
    auto t = get_string(b, "text");
    if (!t) bad_request(bname + ".text is required", bname + ".text");
    if (!text.empty()) text += "\n";
    text += *t;
  }
  return text;
}

}  // namespace

ChatRequest parse_anthropic_messages(const ojson& body) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  ChatRequest r;
  const ojson* max_tokens = field(body, "max_tokens");
  if (!max_tokens) bad_request("max_tokens: Field required", "max_tokens");
  r.max_tokens = get_int(body, "max_tokens", 1, INT32_MAX);

  if (const ojson* system = field(body, "system"))
    r.messages.push_back({{"role", "system"}, {"content", blocks_text(*system, "system")}});

  const ojson* messages = field(body, "messages");
  if (!messages) bad_request("messages: Field required", "messages");
  if (!messages->is_array()) wrong("messages", "an array");
  if (messages->empty()) bad_request("messages: at least one message is required", "messages");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string name = "messages." + std::to_string(i);
    const ojson& m = (*messages)[i];
    if (!m.is_object()) wrong(name, "an object");
    const ojson* role_v = field(m, "role");
    if (!role_v || !role_v->is_string())
      bad_request(name + ".role: Field required", name + ".role");
    const std::string role = role_v->get<std::string>();
    if (role != "user" && role != "assistant")
      bad_request(name + ".role: unknown role '" + role + "' (expected user or assistant)",
                  name + ".role");
    const ojson* content = field(m, "content");
    if (!content) bad_request(name + ".content: Field required", name + ".content");
    if (content->is_string()) {
      r.messages.push_back({{"role", role}, {"content", content->get<std::string>()}});
      continue;
    }
    if (!content->is_array()) wrong(name + ".content", "a string or an array of content blocks");
    std::string text, reasoning;
    ojson calls = ojson::array();
    std::vector<ojson> tool_messages;
    for (size_t j = 0; j < content->size(); ++j) {
      const ojson& b = (*content)[j];
      const std::string bname = name + ".content." + std::to_string(j);
      if (!b.is_object()) wrong(bname, "an object");
      const std::string type = get_string(b, "type").value_or("");
      if (type == "text") {
        auto t = get_string(b, "text");
        if (!t) bad_request(bname + ".text: Field required", bname + ".text");
        if (!text.empty()) text += "\n";
        text += *t;
      } else if (type == "thinking" && role == "assistant") {
        reasoning += get_string(b, "thinking").value_or("");
      } else if (type == "redacted_thinking") {
        // Opaque to us; nothing to show the template.
      } else if (type == "tool_use" && role == "assistant") {
        auto id = get_string(b, "id");
        auto tname = get_string(b, "name");
        if (!id || !tname) bad_request(bname + ": tool_use needs id and name", bname);
        const ojson* input = field(b, "input");
        if (input && !input->is_object()) wrong(bname + ".input", "an object");
        calls.push_back(
            {{"id", *id},
             {"type", "function"},
             {"function", {{"name", *tname}, {"arguments", input ? *input : ojson::object()}}}});
      } else if (type == "tool_result" && role == "user") {
        auto id = get_string(b, "tool_use_id");
        if (!id) bad_request(bname + ".tool_use_id: Field required", bname + ".tool_use_id");
        std::string result;
        if (const ojson* c = field(b, "content")) result = blocks_text(*c, bname + ".content");
        if (get_bool(b, "is_error").value_or(false)) result = "Error: " + result;
        tool_messages.push_back({{"role", "tool"}, {"content", result}, {"tool_call_id", *id}});
      } else {
        bad_request(bname + ": content block type '" + type + "' is not supported in a " + role +
                        " message",
                    bname + ".type");
      }
    }
    for (auto& t : tool_messages) r.messages.push_back(std::move(t));
    if (role == "assistant") {
      ojson out = {{"role", "assistant"}, {"content", text}};
      if (!reasoning.empty()) out["reasoning_content"] = reasoning;
      if (!calls.empty()) out["tool_calls"] = calls;
      r.messages.push_back(std::move(out));
    } else if (!text.empty() || tool_messages.empty()) {
      r.messages.push_back({{"role", "user"}, {"content", text}});
    }
  }

  r.sampling = parse_sampling(body);
  if (r.sampling.temperature && *r.sampling.temperature > 1)
    bad_request("temperature must be between 0 and 1", "temperature");
  r.stop = parse_stop(body, "stop_sequences");
  r.stream = get_bool(body, "stream").value_or(false);
  r.include_usage = true;

  if (const ojson* tools = field(body, "tools")) {
    if (!tools->is_array()) wrong("tools", "an array");
    ojson out = ojson::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const std::string name = "tools." + std::to_string(i);
      const ojson& t = (*tools)[i];
      if (!t.is_object()) wrong(name, "an object");
      auto tname = get_string(t, "name");
      if (!tname) bad_request(name + ".name: Field required", name + ".name");
      ojson fn = {{"name", *tname}};
      if (auto d = get_string(t, "description")) fn["description"] = *d;
      const ojson* schema = field(t, "input_schema");
      if (!schema || !schema->is_object())
        bad_request(name + ".input_schema: Field required", name + ".input_schema");
      fn["parameters"] = *schema;
      out.push_back({{"type", "function"}, {"function", fn}});
    }
    if (!out.empty()) r.tools = out;
  }
  if (const ojson* tc = field(body, "tool_choice")) {
    if (!tc->is_object()) wrong("tool_choice", "an object");
    const std::string type = tc->value("type", "");
    if (type == "auto")
      r.tool_choice = "auto";
    else if (type == "any")
      r.tool_choice = "required";
    else if (type == "none")
      r.tool_choice = "none";
    else if (type == "tool") {
      auto n = get_string(*tc, "name");
      if (!n) bad_request("tool_choice.name: Field required", "tool_choice.name");
      r.tool_choice = "named";
      r.tool_choice_name = *n;
    } else {
      bad_request("tool_choice.type must be auto, any, tool or none", "tool_choice.type");
    }
    if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tools.is_null())
      bad_request("tool_choice needs tools", "tool_choice");
    if (auto d = get_bool(*tc, "disable_parallel_tool_use")) r.parallel_tool_calls = !*d;
  }
  if (const ojson* thinking = field(body, "thinking")) {
    if (!thinking->is_object()) wrong("thinking", "an object");
    const std::string type = thinking->value("type", "");
    if (type == "enabled")
      r.template_kwargs["enable_thinking"] = true;
    else if (type == "disabled")
      r.template_kwargs["enable_thinking"] = false;
    else
      bad_request("thinking.type must be enabled or disabled", "thinking.type");
  }
  return r;
}

}  // namespace hearth::server
