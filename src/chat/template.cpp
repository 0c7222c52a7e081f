// ChatTemplate: parse once, render per request; render_chat builds the context the way
// transformers' apply_chat_template does (render_jinja_template's keyword arguments).
#include "chat/template.h"

#include "chat/evaluator.h"
#include "chat/parser.h"

namespace hearth::chat {

ChatTemplate ChatTemplate::parse(std::string_view source) {
  ChatTemplate t;
  t.program_ = parse_template(source);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context,
                                 const RenderOptions& options) const {
  if (!context.is_object())
    throw TemplateError("chat template: the render context must be a JSON object");
  auto root = std::make_shared<Scope>();
  for (auto it = context.begin(); it != context.end(); ++it)
    root->set(it.key(), value_from_json(it.value()));
  Evaluator ev(options, root);
  return ev.render(program_->body);
}

nlohmann::ordered_json build_chat_context(const ChatInputs& in) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = in.messages;
  ctx["tools"] = in.tools;
  ctx["documents"] = in.documents;
  ctx["add_generation_prompt"] = in.add_generation_prompt;
  if (in.special_tokens.is_object()) {
    for (auto it = in.special_tokens.begin(); it != in.special_tokens.end(); ++it)
      ctx[it.key()] = it.value();
  }
  if (in.kwargs.is_object()) {
    for (auto it = in.kwargs.begin(); it != in.kwargs.end(); ++it) ctx[it.key()] = it.value();
  }
  return ctx;
}

std::string render_chat(const ChatTemplate& tmpl, const ChatInputs& in,
                        const RenderOptions& options) {
  if (!in.messages.is_array())
    throw TemplateError("chat template: messages must be a list of message objects");
  if (in.messages.empty()) {
    throw TemplateError(
        "Cannot apply chat template to an empty conversation. Provide at least one message.");
  }
  if (!in.tools.is_null()) {
    if (!in.tools.is_array())
      throw TemplateError("chat template: tools must be a list of JSON schemas");
    for (const auto& t : in.tools) {
      if (!t.is_object()) {
        throw TemplateError(
            "Tools should either be a JSON schema, or a callable function with type hints and a "
            "docstring "
            "suitable for auto-conversion to a schema.");
      }
    }
  }
  if (!in.documents.is_null()) {
    if (!in.documents.is_array())
      throw TemplateError("Documents should be a list of dicts with 'title' and 'text' keys!");
    for (const auto& d : in.documents) {
      if (!d.is_object())
        throw TemplateError("Documents should be a list of dicts with 'title' and 'text' keys!");
    }
  }
  return tmpl.render(build_chat_context(in), options);
}

}  // namespace hearth::chat
