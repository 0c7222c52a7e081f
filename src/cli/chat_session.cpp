#include "cli/chat_session.h"

#include <fstream>
#include <sstream>

#include "chat/reasoning_parser.h"
#include "chat/template.h"
#include "core/error.h"
#include "core/json_bounded.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

using nlohmann::ordered_json;

ChatSession::ChatSession(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  const std::string source = tokenizer.chat_template();
  if (source.empty())
    fail("this model has no chat template (tokenizer_config.json): use hearth generate instead");
  template_ = std::make_unique<chat::ChatTemplate>(chat::ChatTemplate::parse(source));
  has_thinking_switch_ = source.find("enable_thinking") != std::string::npos;
}

ChatSession::~ChatSession() = default;

ordered_json ChatSession::render_messages(size_t first, const std::string& user) const {
  ordered_json out = ordered_json::array();
  if (!system_.empty()) out.push_back({{"role", "system"}, {"content", system_}});
  for (size_t i = first; i < messages_.size(); ++i) out.push_back(messages_[i]);
  out.push_back({{"role", "user"}, {"content", user}});
  return out;
}

ChatPrompt ChatSession::prompt_for(const std::string& user, int64_t context,
                                   int64_t reply_tokens) const {
  chat::ChatInputs inputs;
  inputs.add_generation_prompt = true;
  inputs.special_tokens["bos_token"] = tokenizer_.bos_token();
  inputs.special_tokens["eos_token"] = tokenizer_.eos_token();
  if (thinking_) inputs.kwargs["enable_thinking"] = *thinking_;
  // Whole exchanges (a user turn and its reply) leave together, oldest first.
  for (size_t first = 0; first <= messages_.size(); first += 2) {
    inputs.messages = render_messages(first, user);
    const std::string text = chat::render_chat(*template_, inputs);
    ChatPrompt p;
    p.tokens = tokenizer_.encode(text, false);
    if (int64_t(p.tokens.size()) + reply_tokens > context) continue;
    p.starts_in_reasoning = chat::prompt_opens_reasoning(text);
    p.turns_left_out = int64_t(first);
    return p;
  }
  fail("the message does not fit in the context of {} tokens with room for a reply of {}", context,
       reply_tokens);
}

void ChatSession::add_exchange(const std::string& user, const std::string& reply,
                               const std::string& reasoning) {
  messages_.push_back({{"role", "user"}, {"content", user}});
  ordered_json assistant = {{"role", "assistant"}, {"content", reply}};
  if (!reasoning.empty()) assistant["reasoning_content"] = reasoning;
  messages_.push_back(std::move(assistant));
}

void ChatSession::save(const std::string& path) const {
  ordered_json doc = {{"system", system_}, {"messages", messages_}};
  std::ofstream out(path);
  out << doc.dump(2) << "\n";
  if (!out) fail("cannot write {}", path);
}

void ChatSession::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read {}", path);
  std::stringstream text;
  text << in.rdbuf();
  ordered_json doc;
  if (parse_json_bounded(text.str(), doc) != JsonParseStatus::Ok)
    fail("{}: not a JSON document (or nested deeper than {} levels)", path, kMaxJsonDepth);
  if (!doc.is_object() || !doc.contains("messages") || !doc["messages"].is_array())
    fail("{}: expected {{\"system\": ..., \"messages\": [...]}} as /save writes", path);
  std::string system;
  if (doc.contains("system")) {
    if (!doc["system"].is_string()) fail("{}: \"system\" must be a string", path);
    system = doc["system"].get<std::string>();
  }
  ordered_json messages = ordered_json::array();
  for (const auto& m : doc["messages"]) {
    const bool ok = m.is_object() && m.contains("role") && m.contains("content") &&
                    m["content"].is_string() && (m["role"] == "user" || m["role"] == "assistant");
    if (!ok)
      fail("{}: message {} must be {{\"role\": \"user\" or \"assistant\", \"content\": text}}",
           path, messages.size());
    if (m["role"] != (messages.size() % 2 == 0 ? "user" : "assistant"))
      fail("{}: message {} should be a {} turn (turns alternate, user first)", path,
           messages.size(), messages.size() % 2 == 0 ? "user" : "assistant");
    messages.push_back(m);
  }
  if (messages.size() % 2 != 0) fail("{}: the last user message has no reply", path);
  system_ = std::move(system);
  messages_ = std::move(messages);
}

}  // namespace hearth::cli
