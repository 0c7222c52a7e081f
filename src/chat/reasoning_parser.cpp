// A small state machine over a pending buffer: Start (nothing but whitespace seen; a "<think>"
// here opens reasoning), Reasoning (until the close tag), AfterClose (dropping newlines), Content.
#include "chat/reasoning_parser.h"

#include <algorithm>

#include "chat/stream_text.h"

namespace hearth::chat {

ReasoningParser::ReasoningParser(bool start_in_reasoning, std::string open_tag,
                                 std::string close_tag)
    : open_(std::move(open_tag)),
      close_(std::move(close_tag)),
      state_(start_in_reasoning ? State::Reasoning : State::Start) {}

// Reasoning without the newlines that pad it inside the tags (templates strip them too): leading
// ones are dropped, trailing ones held until more reasoning text follows.
void ReasoningParser::emit_reasoning(ReasoningSplit& out, std::string s, bool closing) {
  if (!started_) {
    size_t i = 0;
    while (i < s.size() && s[i] == '\n') ++i;
    s.erase(0, i);
    if (s.empty()) return;
    started_ = true;
  }
  size_t end = s.size();
  while (end > 0 && s[end - 1] == '\n') --end;
  if (end == 0) {
    if (closing)
      held_nl_.clear();
    else
      held_nl_ += s;
    return;
  }
  out.reasoning += held_nl_ + s.substr(0, end);
  held_nl_ = closing ? std::string() : s.substr(end);
}

ReasoningSplit ReasoningParser::push(std::string_view text) {
  ReasoningSplit out;
  pending_.append(text);
  step(out, false);
  return out;
}

ReasoningSplit ReasoningParser::finish() {
  ReasoningSplit out;
  step(out, true);
  return out;
}

void ReasoningParser::step(ReasoningSplit& out, bool final) {
  for (;;) {
    switch (state_) {
      case State::Start: {
        size_t i = 0;
        while (i < pending_.size() && is_space(pending_[i])) ++i;
        std::string_view rest = std::string_view(pending_).substr(i);
        if (rest.size() >= open_.size() && rest.substr(0, open_.size()) == open_) {
          pending_.erase(0, i + open_.size());  // whitespace before <think> is dropped
          state_ = State::Reasoning;
          continue;
        }
        if (!final && open_.compare(0, rest.size(), rest) == 0) return;  // maybe "<thi"
        state_ = State::Content;
        continue;
      }
      case State::Reasoning: {
        const size_t pos = pending_.find(close_);
        if (pos != std::string::npos) {
          emit_reasoning(out, pending_.substr(0, pos), true);
          pending_.erase(0, pos + close_.size());
          state_ = State::AfterClose;
          continue;
        }
        const size_t hold = final ? 0 : partial_suffix(pending_, close_);
        emit_reasoning(out, pending_.substr(0, pending_.size() - hold), final);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      case State::AfterClose: {
        size_t i = 0;
        while (i < pending_.size() && (pending_[i] == '\n' || pending_[i] == '\r')) ++i;
        pending_.erase(0, i);
        if (pending_.empty()) return;
        state_ = State::Content;
        continue;
      }
      case State::Content:
        out.content += pending_;
        pending_.clear();
        return;
    }
  }
}

bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag,
                            std::string_view close_tag) {
  const size_t open = prompt.rfind(open_tag);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(close_tag);
  return close == std::string_view::npos || close < open;
}

ReasoningSplit split_reasoning(std::string_view text, bool start_in_reasoning) {
  ReasoningParser p(start_in_reasoning);
  ReasoningSplit a = p.push(text);
  ReasoningSplit b = p.finish();
  a.reasoning += b.reasoning;
  a.content += b.content;
  return a;
}

}  // namespace hearth::chat
