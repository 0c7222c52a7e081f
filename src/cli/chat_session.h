// The conversation behind `hearth chat`: the turns so far, the system prompt and the thinking
// switch, rendered with the model's chat template into the next prompt. When the conversation
// outgrows the context, its oldest turns are left out of the prompt (the system prompt stays),
// as the chat page does; they stay in the saved conversation.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace hearth {
class Tokenizer;
}

namespace hearth::chat {
class ChatTemplate;
}

namespace hearth::cli {

struct ChatPrompt {
  std::vector<int32_t> tokens;
  bool starts_in_reasoning = false;  // the template opened a think block for the reply
  int64_t turns_left_out = 0;        // oldest messages not in the prompt, for lack of context
};

class ChatSession {
 public:
  // Throws hearth::Error when the model has no chat template.
  explicit ChatSession(const Tokenizer& tokenizer);
  ~ChatSession();

  void set_system(std::string text) { system_ = std::move(text); }
  const std::string& system() const { return system_; }
  // The template's enable_thinking switch; nullopt: the template's default.
  void set_thinking(std::optional<bool> on) { thinking_ = on; }
  bool template_has_thinking_switch() const { return has_thinking_switch_; }
  void reset() { messages_ = nlohmann::ordered_json::array(); }

  // The prompt for a reply to `user` (not yet added): the conversation + user, rendered, with
  // the oldest turns dropped until it and `reply_tokens` fit in `context`. Throws hearth::Error
  // when even the latest message alone does not fit.
  ChatPrompt prompt_for(const std::string& user, int64_t context, int64_t reply_tokens) const;
  // Records a finished exchange. The reply's reasoning is kept beside it (templates that
  // re-render thinking see reasoning_content) but is not part of its content.
  void add_exchange(const std::string& user, const std::string& reply,
                    const std::string& reasoning);

  // {"system": ..., "messages": [...]} (OpenAI-style messages), and back; load() throws
  // hearth::Error naming what is wrong with the file.
  void save(const std::string& path) const;
  void load(const std::string& path);
  size_t n_messages() const { return messages_.size(); }

 private:
  nlohmann::ordered_json render_messages(size_t first, const std::string& user) const;

  const Tokenizer& tokenizer_;
  std::unique_ptr<chat::ChatTemplate> template_;
  bool has_thinking_switch_ = false;
  std::string system_;
  std::optional<bool> thinking_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
};

}  // namespace hearth::cli
