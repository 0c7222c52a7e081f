// The OpenAI Responses API's request and objects. A request's `input` (a string or a list of
// items) is checked field by field (400s name the field: "input[2].content[0].type") and kept
// as normalised items; a conversation of items (a previous response's input and output, then the
// new input) becomes the chat template's messages: a run of reasoning, assistant message and
// function_call items is one assistant turn (reasoning_content, content, tool_calls), as the model
// wrote it, so a follow-up renders to the previous prompt plus its output (the prompt cache then
// reuses it); function_call_output items become "tool" messages.
// Normalised items: {"type": "message", "role", "content": [{"type", "text"}]},
// {"type": "function_call", "call_id", "name", "arguments" (a string)},
// {"type": "function_call_output", "call_id", "output" (a string)},
// {"type": "reasoning", "summary": [...], "content": [{"type": "reasoning_text", "text"}]}.
// Every item has an "id" after its type: the client's, else a new one (msg_, fc_, fco_, rs_), so
// a stored response lists its input items with ids that stay the same (responses_input_items.h).
#pragma once
#include <optional>
#include <string>

#include "chat/tool_parser.h"
#include "runtime/engine.h"
#include "server/schemas.h"

namespace hearth::server {

struct ResponsesRequest {
  // Tools (as chat-style function tools), tool choice, sampling, max_tokens, template kwargs;
  // its messages are filled from the conversation by responses_messages().
  ChatRequest chat;
  ojson input = ojson::array();  // this request's items, normalised
  std::optional<std::string> instructions;
  std::optional<std::string> previous_response_id;
  bool store = true;
  bool truncation_auto = false;
  // The fields a response object echoes, with OpenAI's defaults for those not given.
  ojson echo = ojson::object();
};

ResponsesRequest parse_responses_request(const ojson& body);

// The chat messages of a conversation (normalised items), after a system message holding
// `instructions` when given.
ojson responses_messages(const ojson& items, const std::optional<std::string>& instructions);

// Output items. status: "in_progress", "completed" or "incomplete".
ojson responses_reasoning_item(const std::string& id, const std::string& text, const char* status);
ojson responses_message_item(const std::string& id, const std::string& text, const char* status);
ojson responses_function_call_item(const std::string& id, const std::string& call_id,
                                   const chat::ToolCall& call, const char* status);
ojson responses_output_text_part(const std::string& text);

ojson responses_usage(const GenerationUsage& usage, int64_t reasoning_tokens);

// A response object: the request's echoed fields with id, created_at, model, status, output,
// output_text (the SDKs' convenience property, sent so their stream helpers have it too), usage
// (null until known), incomplete_details and error.
ojson responses_object(const ResponsesRequest& request, const std::string& id, int64_t created_at,
                       const std::string& model, const std::string& status, ojson output,
                       ojson usage);

}  // namespace hearth::server
