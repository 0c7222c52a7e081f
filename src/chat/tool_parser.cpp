// Tool-call parsing: one streaming state machine (Start → Outside ⇄ Inside) shared by every
// format; formats differ only in their markers and in how a call's body is read.
#include "chat/tool_parser.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "chat/stream_text.h"
#include "core/json_bounded.h"

namespace hearth::chat {

using nlohmann::json;

namespace {

constexpr std::string_view kToolCallOpen = "<tool_call>";
constexpr std::string_view kToolCallClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view open_tag(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
    case ToolCallFormat::Qwen3Coder:
      return kToolCallOpen;
    case ToolCallFormat::Mistral:
      return kMistralOpen;
    case ToolCallFormat::Llama3Json:
      return kPythonTag;
    case ToolCallFormat::None:
      break;
  }
  return {};
}

// Splits "{…} ; {…}" into top-level JSON objects; false if anything else is in between.
bool split_objects(std::string_view s, std::vector<std::string_view>& out) {
  size_t i = 0;
  while (i < s.size()) {
    if (is_space(s[i]) || s[i] == ';' || s[i] == ',') {
      ++i;
      continue;
    }
    if (s[i] != '{') return false;
    int depth = 0;
    bool in_str = false;
    size_t j = i;
    for (; j < s.size(); ++j) {
      const char c = s[j];
      if (in_str) {
        if (c == '\\')
          ++j;
        else if (c == '"')
          in_str = false;
      } else if (c == '"') {
        in_str = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (--depth == 0) break;
      }
    }
    if (j >= s.size()) return false;
    out.push_back(s.substr(i, j + 1 - i));
    i = j + 1;
  }
  return !out.empty();
}

// {"name": …, "arguments"|"parameters": {…} or "…"} → ToolCall.
bool call_from_json(const json& j, std::vector<ToolCall>& calls) {
  if (!j.is_object()) return false;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return false;
  ToolCall call;
  call.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_string()) {
    call.arguments = args->get<std::string>();  // already serialised by the model
  } else {
    call.arguments = args->dump();
  }
  calls.push_back(std::move(call));
  return true;
}

bool parse_json_calls(std::string_view body, std::vector<ToolCall>& calls) {
  body = trim(body);
  std::vector<ToolCall> found;
  json j = parse_json_or_discarded<json>(body);
  if (!j.is_discarded()) {
    if (j.is_array()) {
      for (const auto& item : j)
        if (!call_from_json(item, found)) return false;
    } else if (!call_from_json(j, found)) {
      return false;
    }
  } else {
    std::vector<std::string_view> objects;
    if (!split_objects(body, objects)) return false;
    for (auto o : objects) {
      json item = parse_json_or_discarded<json>(o);
      if (item.is_discarded() || !call_from_json(item, found)) return false;
    }
  }
  if (found.empty()) return false;
  calls.insert(calls.end(), found.begin(), found.end());
  return true;
}

// The JSON schema of `tool`'s parameter `key`, or null.
const json* parameter_schema(const json& tools, const std::string& tool, const std::string& key) {
  if (!tools.is_array()) return nullptr;
  for (const auto& t : tools) {
    const json& fn = t.contains("function") ? t["function"] : t;
    if (!fn.is_object() || fn.value("name", "") != tool) continue;
    const json* params = fn.contains("parameters")     ? &fn["parameters"]
                         : fn.contains("input_schema") ? &fn["input_schema"]
                                                       : nullptr;
    if (!params || !params->is_object() || !params->contains("properties")) return nullptr;
    const json& props = (*params)["properties"];
    if (props.is_object() && props.contains(key)) return &props[key];
    return nullptr;
  }
  return nullptr;
}

// <function=NAME><parameter=K>V</parameter>…</function>, possibly several per body.
bool parse_xml_calls(std::string_view body, const json& tools, std::vector<ToolCall>& calls) {
  std::vector<ToolCall> found;
  size_t pos = 0;
  for (;;) {
    const size_t f = body.find("<function=", pos);
    if (f == std::string_view::npos) break;
    const size_t name_end = body.find('>', f);
    if (name_end == std::string_view::npos) return false;
    ToolCall call;
    call.name = std::string(trim(body.substr(f + 10, name_end - f - 10)));
    if (call.name.empty()) return false;
    size_t fn_end = body.find("</function>", name_end);
    if (fn_end == std::string_view::npos) fn_end = body.size();
    std::string_view inner = body.substr(name_end + 1, fn_end - name_end - 1);
    json args = json::object();
    size_t p = 0;
    for (;;) {
      const size_t k = inner.find("<parameter=", p);
      if (k == std::string_view::npos) break;
      const size_t key_end = inner.find('>', k);
      if (key_end == std::string_view::npos) return false;
      const std::string key(trim(inner.substr(k + 11, key_end - k - 11)));
      size_t v_end = inner.find("</parameter>", key_end);
      size_t next = v_end == std::string_view::npos ? std::string_view::npos : v_end + 12;
      if (v_end == std::string_view::npos) {  // tolerate a missing close tag
        v_end = inner.find("<parameter=", key_end);
        if (v_end == std::string_view::npos) v_end = inner.size();
        next = v_end;
      }
      std::string_view value = inner.substr(key_end + 1, v_end - key_end - 1);
      // The template writes "\nVALUE\n"; drop exactly those newlines.
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      const json* schema = parameter_schema(tools, call.name, key);
      args[key] = convert_parameter(value, schema ? *schema : json());
      p = next;
    }
    // Parameter values are the model's raw text, which need not be valid UTF-8; dump() would
    // throw on it.
    call.arguments = args.dump(-1, ' ', false, json::error_handler_t::replace);
    found.push_back(std::move(call));
    pos = fn_end == body.size() ? fn_end : fn_end + 11;
  }
  if (found.empty()) return false;
  calls.insert(calls.end(), found.begin(), found.end());
  return true;
}

// Mistral after [TOOL_CALLS]: a JSON list, or NAME[ARGS]{…} (v11+), repeated with [TOOL_CALLS].
bool parse_mistral(std::string_view body, std::vector<ToolCall>& calls) {
  std::string_view t = trim(body);
  if (!t.empty() && (t.front() == '[' || t.front() == '{')) return parse_json_calls(t, calls);
  std::vector<ToolCall> found;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t next = body.find(kMistralOpen, pos);
    if (next == std::string_view::npos) next = body.size();
    std::string_view part = trim(body.substr(pos, next - pos));
    pos = next + (next < body.size() ? kMistralOpen.size() : 0);
    if (part.empty()) continue;
    const size_t a = part.find("[ARGS]");
    if (a == std::string_view::npos) return false;
    std::string name(trim(part.substr(0, a)));
    if (const size_t id = name.find("[CALL_ID]"); id != std::string::npos) name.resize(id);
    json args = parse_json_or_discarded<json>(trim(part.substr(a + 6)));
    if (name.empty() || args.is_discarded()) return false;
    found.push_back({name, args.is_string() ? args.get<std::string>() : args.dump()});
  }
  if (found.empty()) return false;
  calls.insert(calls.end(), found.begin(), found.end());
  return true;
}

}  // namespace

json convert_parameter(std::string_view value, const json& schema) {
  std::vector<std::string> types;
  if (schema.is_object() && schema.contains("type")) {
    const json& t = schema["type"];
    if (t.is_string()) types.push_back(t.get<std::string>());
    if (t.is_array())
      for (const auto& x : t)
        if (x.is_string()) types.push_back(x.get<std::string>());
  } else if (schema.is_object() && (schema.contains("anyOf") || schema.contains("oneOf"))) {
    types.push_back("any");
  }
  const std::string text(value);
  const std::string_view trimmed = trim(value);
  // "null" in a nullable parameter is null, even when the union lists string first.
  if (trimmed == "null" && std::find(types.begin(), types.end(), "null") != types.end())
    return nullptr;
  for (const auto& type : types) {
    if (type == "string") return text;
    if (type == "null" && trimmed == "null") return nullptr;
    if (type == "integer") {
      std::string s(trimmed);
      char* end = nullptr;
      const long long v = std::strtoll(s.c_str(), &end, 10);
      if (!s.empty() && end && *end == '\0') return v;
    }
    if (type == "number") {
      json j = parse_json_or_discarded<json>(trimmed);
      if (!j.is_discarded() && j.is_number()) return j;
    }
    if (type == "boolean") {
      std::string s(trimmed);
      std::transform(s.begin(), s.end(), s.begin(),
                     [](unsigned char c) { return char(std::tolower(c)); });
      if (s == "true") return true;
      if (s == "false") return false;
    }
    if (type == "object" || type == "array" || type == "any") {
      json j = parse_json_or_discarded<json>(trimmed);
      if (!j.is_discarded() && (type == "any" || (type == "object" ? j.is_object() : j.is_array())))
        return j;
    }
  }
  return text;  // no schema, or it did not convert: keep the model's text
}

ToolCallFormat detect_tool_call_format(std::string_view tmpl) {
  if (tmpl.find("<function=") != std::string_view::npos) return ToolCallFormat::Qwen3Coder;
  if (tmpl.find("<tool_call>") != std::string_view::npos) return ToolCallFormat::Hermes;
  if (tmpl.find("[TOOL_CALLS]") != std::string_view::npos) return ToolCallFormat::Mistral;
  if (tmpl.find("<|python_tag|>") != std::string_view::npos ||
      (tmpl.find("<|start_header_id|>") != std::string_view::npos &&
       tmpl.find("\"parameters\"") != std::string_view::npos))
    return ToolCallFormat::Llama3Json;
  return ToolCallFormat::None;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Qwen3Coder:
      return "qwen3_coder";
    case ToolCallFormat::Llama3Json:
      return "llama3_json";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::None:
      break;
  }
  return "none";
}

bool tool_call_format_needs_special_tokens(ToolCallFormat f) {
  return f == ToolCallFormat::Mistral || f == ToolCallFormat::Llama3Json;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, json tools)
    : format_(format), tools_(std::move(tools)) {
  state_ = format_ == ToolCallFormat::Llama3Json ? State::Start : State::Outside;
}

// Releases content, holding trailing whitespace back (dropped if a tool call follows).
std::string ToolCallParser::release_outside(bool final) {
  std::string text = held_ws_ + pending_;
  pending_.clear();
  held_ws_.clear();
  size_t end = text.size();
  while (end > 0 && is_space(text[end - 1])) --end;
  if (final) {
    if (end == 0 && n_calls_ > 0) return {};
    if (n_calls_ > 0) text.resize(end);
    return text;
  }
  held_ws_ = text.substr(end);
  text.resize(end);
  return text;
}

std::string ToolCallParser::push(std::string_view text, std::vector<ToolCall>& calls) {
  pending_.append(text);
  std::string out;
  if (format_ == ToolCallFormat::None) return release_outside(false);
  for (;;) {
    if (state_ ==
        State::Start) {  // Llama 3: a call is the whole output, starting with { or the tag
      size_t i = 0;
      while (i < pending_.size() && is_space(pending_[i])) ++i;
      std::string_view rest = std::string_view(pending_).substr(i);
      if (rest.empty()) return out;
      if (rest.front() == '{') {
        pending_.erase(0, i);
        state_ = State::Inside;
        continue;
      }
      if (rest.substr(0, std::min(rest.size(), kPythonTag.size())) ==
          kPythonTag.substr(0, std::min(rest.size(), kPythonTag.size()))) {
        if (rest.size() < kPythonTag.size()) return out;  // maybe the tag, wait
        pending_.erase(0, i + kPythonTag.size());
        state_ = State::Inside;
        continue;
      }
      state_ = State::Outside;
      continue;
    }
    if (state_ == State::Outside) {
      const std::string_view tag = open_tag(format_);
      const size_t pos =
          format_ == ToolCallFormat::Llama3Json ? std::string::npos : pending_.find(tag);
      if (pos == std::string::npos) {
        const size_t hold =
            format_ == ToolCallFormat::Llama3Json ? 0 : partial_suffix(pending_, tag);
        std::string keep = pending_.substr(pending_.size() - hold);
        pending_.resize(pending_.size() - hold);
        out += release_outside(false);
        pending_ = std::move(keep);
        return out;
      }
      std::string after = pending_.substr(pos + tag.size());
      pending_.resize(pos);
      out += release_outside(false);
      held_ws_.clear();  // whitespace right before a call is not content
      pending_ = std::move(after);
      state_ = State::Inside;
      continue;
    }
    // Inside: <tool_call> bodies end at their close tag; the other formats run to the end.
    if (format_ != ToolCallFormat::Hermes && format_ != ToolCallFormat::Qwen3Coder) return out;
    const size_t end = pending_.find(kToolCallClose);
    if (end == std::string::npos) return out;
    std::string body = pending_.substr(0, end);
    std::string after = pending_.substr(end + kToolCallClose.size());
    const size_t before = calls.size();
    if (parse_body(body, calls)) {
      n_calls_ += calls.size() - before;
    } else {
      pending_ = std::string(kToolCallOpen) + body + std::string(kToolCallClose);
      out += release_outside(false);
    }
    pending_ = std::move(after);
    state_ = State::Outside;
  }
}

std::string ToolCallParser::finish(std::vector<ToolCall>& calls) {
  std::string out;
  if (state_ == State::Inside) {
    const size_t before = calls.size();
    if (parse_body(pending_, calls)) {
      n_calls_ += calls.size() - before;
      pending_.clear();
    } else if (format_ != ToolCallFormat::Llama3Json) {
      pending_ = std::string(open_tag(format_)) + pending_;
    }
    state_ = State::Outside;
  }
  out += release_outside(true);
  return out;
}

bool ToolCallParser::parse_body(std::string_view body, std::vector<ToolCall>& calls) const {
  switch (format_) {
    case ToolCallFormat::Hermes:
    case ToolCallFormat::Qwen3Coder:
      // Either body style may appear with either template family.
      if (trim(body).substr(0, 1) == "{") return parse_json_calls(body, calls);
      return parse_xml_calls(body, tools_, calls);
    case ToolCallFormat::Llama3Json:
      return parse_json_calls(body, calls);
    case ToolCallFormat::Mistral:
      return parse_mistral(body, calls);
    case ToolCallFormat::None:
      break;
  }
  return false;
}

ParsedToolCalls parse_tool_calls(ToolCallFormat format, std::string_view text, const json& tools) {
  ToolCallParser p(format, tools);
  ParsedToolCalls out;
  out.content = p.push(text, out.calls);
  out.content += p.finish(out.calls);
  return out;
}

}  // namespace hearth::chat
