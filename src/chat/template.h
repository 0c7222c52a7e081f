// Public API of hearth's chat-template engine: a Jinja2 renderer that reproduces what
// transformers' apply_chat_template produces, byte for byte (see docs/chat-templates.md).
// A template is parsed once and rendered many times; rendering is const and thread-safe.
// Every failure is a hearth::Error: TemplateError for malformed templates ("chat template:
// line L, column C: ...") and runtime errors ("chat template: line L: ..."), TemplateRaise for
// the template's own raise_exception(message) (what() is the message exactly).
#pragma once
#include <cstdint>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace hearth::chat {

class TemplateError : public hearth::Error {
 public:
  using Error::Error;
};

// raise_exception() from inside a template: a request error, not an engine failure.
class TemplateRaise : public hearth::Error {
 public:
  using Error::Error;
};

// Guards against hostile templates: each limit ends the render with a TemplateError.
struct RenderOptions {
  size_t max_output_bytes = size_t{64} << 20;  // also caps any single string built
  int max_call_depth = 200;         // nested macro calls (Python's recursion limit analogue)
  uint64_t max_steps = 10'000'000;  // statements, loop iterations and calls (~1.5 s)
  std::optional<std::time_t> now;   // strftime_now's clock; the real local time if empty
};

struct TemplateProgram;

class ChatTemplate {
 public:
  // Throws TemplateError with line and column on a malformed template.
  static ChatTemplate parse(std::string_view source);
  // Renders with `context` (a JSON object) as the template's variables. Key order is kept, as
  // transformers keeps Python dict order (it shows in `tojson` and `items()`).
  std::string render(const nlohmann::ordered_json& context,
                     const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const TemplateProgram> program_;
};

// What apply_chat_template passes to a template.
struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // message dicts, as given
  nlohmann::ordered_json tools;      // null when the request has none (templates see None)
  nlohmann::ordered_json documents;  // null when none
  bool add_generation_prompt = true;
  nlohmann::ordered_json special_tokens =
      nlohmann::ordered_json::object();  // bos_token, eos_token, ...
  nlohmann::ordered_json kwargs =
      nlohmann::ordered_json::object();  // enable_thinking, date_string, ...
};

// The template context exactly as transformers builds it: messages, tools, documents,
// add_generation_prompt, then the special-token map, then kwargs (which win on clashes).
nlohmann::ordered_json build_chat_context(const ChatInputs& inputs);

// apply_chat_template(tokenize=False): validates like transformers (no empty conversation,
// tools and documents must be dicts), builds the context and renders.
std::string render_chat(const ChatTemplate& tmpl, const ChatInputs& inputs,
                        const RenderOptions& options = {});

}  // namespace hearth::chat
