// Ollama requests → OllamaRequest (schemas_ollama.h). Messages map onto HF message dicts:
// thinking → reasoning_content, tool_calls with object arguments as they are (what templates
// expect), tool_name → name. options are parsed by the shared sampling parser, under the
// "options." prefix in every message.
#include "server/schemas_ollama.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <ctime>
#include <map>

#include "core/json_bounded.h"
#include "server/errors.h"

namespace hearth::server {

namespace {

[[noreturn]] void ollama_wrong(const std::string& name, const std::string& expected) {
  bad_request(name + " must be " + expected, name);
}

// A string field that may be absent or null (Go's zero value: "").
std::string ollama_string(const ojson& obj, const char* key, const std::string& name) {
  const ojson* v = field(obj, key);
  if (!v) return {};
  if (!v->is_string()) ollama_wrong(name, "a string");
  return v->get<std::string>();
}

// images: hearth runs text models only; a non-empty list is refused rather than dropped.
void ollama_refuse_images(const ojson& obj, const std::string& name) {
  const ojson* images = field(obj, "images");
  if (!images) return;
  if (!images->is_array()) ollama_wrong(name, "an array of base64-encoded images");
  if (!images->empty())
    bad_request(name + ": images are not supported: this server runs text-only models", name);
}

// Ollama's tool_calls: [{"function": {"name", "arguments": {...}}, "id"?}] → the HF shape.
ojson ollama_tool_calls(const ojson& calls, const std::string& name) {
  if (!calls.is_array()) ollama_wrong(name, "an array");
  ojson out = ojson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string cname = fmt::format("{}[{}]", name, i);
    const ojson& c = calls[i];
    if (!c.is_object()) ollama_wrong(cname, "an object");
    const ojson* fn = field(c, "function");
    if (!fn || !fn->is_object()) bad_request(cname + ".function is required", cname + ".function");
    const std::string fname = ollama_string(*fn, "name", cname + ".function.name");
    if (fname.empty()) bad_request(cname + ".function.name is required", cname + ".function.name");
    ojson args = ojson::object();
    if (const ojson* a = field(*fn, "arguments")) {
      if (a->is_object()) {
        args = *a;
      } else if (a->is_string()) {  // OpenAI's shape, sent by clients that mix the two
        args = parse_json_or_discarded<ojson>(a->get<std::string>());
        if (!args.is_object())
          ollama_wrong(cname + ".function.arguments", "an object (or a string holding one)");
      } else {
        ollama_wrong(cname + ".function.arguments", "an object");
      }
    }
    ojson call = {{"type", "function"}, {"function", {{"name", fname}, {"arguments", args}}}};
    if (const ojson* id = field(c, "id"); id && id->is_string()) call["id"] = *id;
    out.push_back(std::move(call));
  }
  return out;
}

ojson ollama_messages(const ojson& body) {
  ojson out = ojson::array();
  const ojson* messages = field(body, "messages");
  if (!messages) return out;
  if (!messages->is_array()) ollama_wrong("messages", "an array");
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string name = fmt::format("messages[{}]", i);
    const ojson& m = (*messages)[i];
    if (!m.is_object()) ollama_wrong(name, "an object");
    const std::string role = ollama_string(m, "role", name + ".role");
    if (role.empty()) bad_request(name + ".role is required", name + ".role");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_request(
          name + ".role: unknown role '" + role + "' (expected system, user, assistant or tool)",
          name + ".role");
    ollama_refuse_images(m, name + ".images");
    ojson msg = {{"role", role}, {"content", ollama_string(m, "content", name + ".content")}};
    if (role == "assistant") {
      const std::string thinking = ollama_string(m, "thinking", name + ".thinking");
      if (!thinking.empty()) msg["reasoning_content"] = thinking;
      if (const ojson* calls = field(m, "tool_calls"); calls && !calls->empty())
        msg["tool_calls"] = ollama_tool_calls(*calls, name + ".tool_calls");
    }
    if (role == "tool") {
      const std::string tool = ollama_string(m, "tool_name", name + ".tool_name");
      if (!tool.empty()) msg["name"] = tool;
      const std::string id = ollama_string(m, "tool_call_id", name + ".tool_call_id");
      if (!id.empty()) msg["tool_call_id"] = id;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// think: true/false, or a level ("max" is above what templates know: "high").
void ollama_think(const ojson& body, ChatRequest& chat) {
  const ojson* think = field(body, "think");
  if (!think) return;
  if (think->is_boolean()) {
    chat.template_kwargs["enable_thinking"] = think->get<bool>();
    return;
  }
  const std::string level = think->is_string() ? think->get<std::string>() : "";
  if (level != "low" && level != "medium" && level != "high" && level != "max")
    bad_request("think must be true, false, \"low\", \"medium\", \"high\" or \"max\"", "think");
  chat.template_kwargs["enable_thinking"] = true;
  chat.template_kwargs["reasoning_effort"] = level == "max" ? "high" : level;
}

// What both endpoints share besides the messages.
void ollama_common(const ojson& body, OllamaRequest& r) {
  r.model = parse_ollama_model(body);
  r.stream = get_bool(body, "stream").value_or(true);
  if (const ojson* format = field(body, "format");
      format && !(format->is_string() && format->get<std::string>().empty()))
    bad_request(
        "format is not supported: this server has no constrained decoding, so it cannot hold "
        "the output to \"json\" or a JSON schema (ask for JSON in the prompt instead)",
        "format");
  if (const ojson* keep_alive = field(body, "keep_alive");
      keep_alive && !ollama_keep_alive_valid(*keep_alive))
    bad_request("keep_alive must be a number of seconds or a duration such as \"5m\" or \"1h30m\"",
                "keep_alive");
  get_bool(body, "truncate");  // type-checked; a prompt over the context is always a 400 here
  get_bool(body, "shift");     // type-checked; generation stops at the end of the context
  ollama_think(body, r.chat);
  const bool logprobs = get_bool(body, "logprobs").value_or(false);
  const int64_t top = get_int(body, "top_logprobs", 0, 20).value_or(0);
  if (logprobs)
    r.chat.logprobs = int(top);
  else if (top > 0)
    bad_request("top_logprobs needs logprobs: true", "top_logprobs");
  parse_ollama_options(body, r);
}

void ollama_options_in(const ojson& options, OllamaRequest& r) {
  ojson opts = options;
  // A negative seed asks for a random one (Ollama's default is -1).
  if (const ojson* seed = field(opts, "seed"); seed && seed->is_number() && seed->get<double>() < 0)
    opts.erase("seed");
  r.chat.sampling = parse_sampling(opts);
  SamplingFields& s = r.chat.sampling;
  if (auto v = get_number(opts, "repeat_penalty", 1e-3, 100)) s.repetition_penalty = float(*v);
  if (auto v = get_int(opts, "repeat_last_n", -1, INT32_MAX)) {
    if (*v == 0) {  // a window of no tokens: no penalty applies
      s.repetition_penalty = 1;
      s.presence_penalty = 0;
      s.frequency_penalty = 0;
    } else {
      s.penalty_last_n = *v < 0 ? 0 : int(*v);  // -1: the whole context (0 here)
    }
  }
  r.chat.stop = parse_stop(opts, "stop");
  if (auto v = get_int(opts, "num_predict", INT32_MIN, INT32_MAX); v && *v > 0) r.num_predict = *v;
  r.num_ctx = get_int(opts, "num_ctx", 1, INT32_MAX);
  // Samplers hearth does not have: their neutral values pass, anything else is refused.
  if (auto v = get_number(opts, "typical_p", 0, 1); v && *v != 1)
    bad_request("typical_p is not supported (locally typical sampling); leave it at 1",
                "typical_p");
  if (auto v = get_number(opts, "tfs_z", 0, 1e9); v && *v != 1)
    bad_request("tfs_z is not supported (tail-free sampling); leave it at 1", "tfs_z");
  if (auto v = get_int(opts, "mirostat", 0, 2); v && *v != 0)
    bad_request("mirostat is not supported; leave it at 0", "mirostat");
  get_number(opts, "mirostat_tau", -1e9, 1e9);
  get_number(opts, "mirostat_eta", -1e9, 1e9);
  // How Ollama loads and runs a model (num_gpu, num_thread, num_batch, use_mmap, ...): the
  // server's own settings apply; these and unknown options are ignored, as Ollama ignores them.
}

uint64_t fnv1a(std::string_view s, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace

std::string parse_ollama_model(const ojson& body) {
  std::string model = ollama_string(body, "model", "model");
  if (model.empty()) model = ollama_string(body, "name", "name");
  if (model.empty()) bad_request("model is required", "model");
  return model;
}

void parse_ollama_options(const ojson& body, OllamaRequest& r) {
  const ojson* options = field(body, "options");
  if (!options) return;
  if (!options->is_object()) ollama_wrong("options", "an object");
  try {
    ollama_options_in(*options, r);
  } catch (const ApiError& e) {
    throw ApiError(e.status, std::string("options.") + e.what(),
                   e.param.empty() ? "options" : "options." + e.param, e.code);
  }
}

OllamaRequest parse_ollama_chat(const ojson& body) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  OllamaRequest r;
  r.chat.messages = ollama_messages(body);
  r.empty = r.chat.messages.empty();
  r.chat.tools = parse_function_tools(body);
  ollama_common(body, r);
  return r;
}

OllamaRequest parse_ollama_generate(const ojson& body) {
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  OllamaRequest r;
  r.prompt = ollama_string(body, "prompt", "prompt");
  r.empty = r.prompt.empty();
  if (!ollama_string(body, "suffix", "suffix").empty())
    bad_request("suffix is not supported (no fill-in-the-middle prompts)", "suffix");
  ollama_refuse_images(body, "images");
  const bool has_template = !ollama_string(body, "template", "template").empty();
  const std::string system = ollama_string(body, "system", "system");
  r.raw = get_bool(body, "raw").value_or(false);
  if (const ojson* context = field(body, "context")) {
    if (!context->is_array()) ollama_wrong("context", "an array of token ids");
    for (const auto& t : *context) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        bad_request("context: token ids must be non-negative integers", "context");
      r.context.push_back(int32_t(t.get<int64_t>()));
    }
  }
  if (r.raw && (has_template || !system.empty() || !r.context.empty()))
    bad_request("raw mode does not support template, system, or context", "raw");
  if (has_template)
    bad_request(
        "template is not supported: the model's own chat template (Jinja) is used; "
        "to give the whole prompt yourself, use raw: true",
        "template");
  if (!system.empty()) r.chat.messages.push_back({{"role", "system"}, {"content", system}});
  r.chat.messages.push_back({{"role", "user"}, {"content", r.prompt}});
  ollama_common(body, r);
  return r;
}

bool ollama_model_matches(std::string_view requested, std::string_view served_id) {
  auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  };
  if (same(requested, served_id)) return true;
  constexpr std::string_view latest = ":latest";
  return requested.size() > latest.size() &&
         same(requested.substr(requested.size() - latest.size()), latest) &&
         same(requested.substr(0, requested.size() - latest.size()), served_id);
}

std::string ollama_model_name(const std::string& served_id) {
  return served_id.find(':') == std::string::npos ? served_id + ":latest" : served_id;
}

bool ollama_keep_alive_valid(const ojson& value) {
  if (value.is_number()) return true;
  if (!value.is_string()) return false;
  // Go's time.ParseDuration: [-+]? then one or more (decimal number, unit), or "0".
  std::string_view s = value.get_ref<const std::string&>();
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
  if (s == "0") return true;
  if (s.empty()) return false;
  static constexpr std::string_view units[] = {"ns", "us", "\xC2\xB5s", "\xCE\xBCs",
                                               "ms", "s",  "m",         "h"};
  while (!s.empty()) {
    size_t digits = 0, i = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
    if (i < s.size() && s[i] == '.') {
      ++i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
    }
    if (digits == 0) return false;
    s.remove_prefix(i);
    size_t unit = 0;
    for (std::string_view u : units)  // longest match first: "ms" before "m"
      if (s.substr(0, u.size()) == u && u.size() > unit) unit = u.size();
    if (unit == 0) return false;
    s.remove_prefix(unit);
  }
  return true;
}

std::string ollama_parameter_size(int64_t n) {
  const double x = double(n);
  auto whole = [](double v) { return v == double(int64_t(v)); };
  if (n >= 1'000'000'000)
    return whole(x / 1e9) ? fmt::format("{:.0f}B", x / 1e9) : fmt::format("{:.1f}B", x / 1e9);
  if (n >= 1'000'000)
    return whole(x / 1e6) ? fmt::format("{:.0f}M", x / 1e6) : fmt::format("{:.2f}M", x / 1e6);
  if (n >= 1'000) return fmt::format("{:.0f}K", x / 1e3);
  return std::to_string(n);
}

std::string ollama_quantization_level(std::string_view formats) {
  std::string best = "unknown";
  double best_weights = -1;
  while (!formats.empty()) {
    const size_t end = formats.find("; ");
    const std::string_view entry = formats.substr(0, end);
    formats = end == std::string_view::npos ? std::string_view() : formats.substr(end + 2);
    const size_t colon = entry.find(": ");
    if (colon == std::string_view::npos || colon == 0) continue;
    double weights = 0;
    try {
      weights = std::stod(std::string(entry.substr(colon + 2)));
    } catch (const std::exception&) {
      continue;
    }
    if (weights > best_weights) {
      best_weights = weights;
      best = std::string(entry.substr(0, colon));
    }
  }
  return best;
}

std::string ollama_digest(std::string_view identity) {
  std::string out;
  for (uint64_t seed = 0; seed < 4; ++seed) out += fmt::format("{:016x}", fnv1a(identity, seed));
  return out;
}

std::string ollama_time(std::chrono::system_clock::time_point t) {
  const int64_t ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  const int64_t secs = ns / 1'000'000'000 - (ns % 1'000'000'000 < 0 ? 1 : 0);
  return ollama_time_from_unix(secs, ns - secs * 1'000'000'000);
}

std::string ollama_time_from_unix(int64_t seconds, int64_t nanoseconds) {
  const std::time_t tt = std::time_t(seconds);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, nanoseconds);
}

}  // namespace hearth::server
