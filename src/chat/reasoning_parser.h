// Streaming split of a model's output into reasoning ("<think>…</think>") and content, for
// reasoning_content (OpenAI-style, as vLLM and llama.cpp emit it) and thinking blocks (Anthropic).
// Invariants: the concatenation of every push() and finish() result equals the parse of the whole
// text at once; a partial tag is held back, never emitted as content or reasoning; the newlines a
// model writes right after </think>, and those padding the reasoning inside the tags, are dropped
// (templates strip them when re-rendering).
#pragma once
#include <string>
#include <string_view>

namespace hearth::chat {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // start_in_reasoning: the prompt already opened a think block (the template ends its
  // generation prompt with "<think>\n"), so output is reasoning until the close tag.
  explicit ReasoningParser(bool start_in_reasoning, std::string open_tag = "<think>",
                           std::string close_tag = "</think>");
  ReasoningSplit push(std::string_view text);
  ReasoningSplit finish();
  bool in_reasoning() const { return state_ == State::Reasoning; }

 private:
  enum class State { Start, Reasoning, AfterClose, Content };
  void step(ReasoningSplit& out, bool final);
  void emit_reasoning(ReasoningSplit& out, std::string text, bool closing);

  std::string open_, close_;
  State state_;
  std::string pending_;
  std::string held_nl_;   // trailing newlines of the reasoning so far
  bool started_ = false;  // some reasoning text was emitted
};

// Whether a rendered prompt leaves the model inside an open think block: its last "<think>"
// comes after its last "</think>".
bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag = "<think>",
                            std::string_view close_tag = "</think>");

// Whole-text form of the parser.
ReasoningSplit split_reasoning(std::string_view text, bool start_in_reasoning);

}  // namespace hearth::chat
