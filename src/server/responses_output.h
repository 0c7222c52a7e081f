// Builds a response's output items from the chat pipeline's events (reasoning, text, tool
// calls) and, for a streamed response, writes the Responses API's SSE events as it goes:
//   reasoning: output_item.added, content_part.added (reasoning_text), reasoning_text.delta…,
//              reasoning_text.done, content_part.done, output_item.done
//   text:      output_item.added, content_part.added (output_text), output_text.delta…,
//              output_text.done, content_part.done, output_item.done
//   tool call: output_item.added (arguments ""), function_call_arguments.delta (all of them),
//              function_call_arguments.done, output_item.done
// An item stays open while output of its kind continues; output of another kind closes it.
// Every event carries the next sequence_number. Whitespace before a message's first text is
// held back and dropped if no text follows (the space around tool calls makes no message).
// The per-token delta events are written as prefix + escaped text + suffix, without a JSON tree.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "server/chat_pipeline.h"
#include "server/schemas.h"

namespace hearth::server {

class ResponsesOutput {
 public:
  // sse: where events are appended; null builds the items only (a non-streamed response).
  explicit ResponsesOutput(std::string* sse) : sse_(sse) {}
  // Appends "event: TYPE\ndata: {"type": TYPE, ...fields, "sequence_number": N}\n\n".
  void event(const std::string& type, const ojson& fields);
  void add(const ChatOutput::Events& events);  // reasoning, then text, then calls
  // The end of the output: closes the open item with `status` ("completed", or "incomplete"
  // when the response was cut short). When there was no output at all and `ensure_message`,
  // adds an empty message, so a response always says something.
  void finish(const char* status, bool ensure_message = true);
  const ojson& items() const { return items_; }
  bool has_reasoning() const { return has_reasoning_; }
  int64_t next_sequence_number() const { return sequence_; }

 private:
  enum class Kind { None, Reasoning, Message };
  void reasoning(std::string_view text);
  void text(std::string_view text);
  void call(const chat::ToolCall& call);
  void open(Kind kind);
  void close(const char* status);
  void delta(std::string_view text);

  std::string* sse_;
  int64_t sequence_ = 0;
  ojson items_ = ojson::array();  // the closed items
  Kind open_ = Kind::None;
  std::string open_id_;
  std::string open_text_;
  std::string held_space_;
  std::string delta_prefix_;  // the open item's delta event up to its "delta" string
  std::string delta_middle_;  // after the string, up to the sequence number
  bool has_reasoning_ = false;
};

}  // namespace hearth::server
