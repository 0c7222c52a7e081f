// The path both chat APIs share: ChatRequest → rendered prompt → GenerationRequest (limits
// checked, sampling defaults applied), and the engine's text → reasoning, content, tool calls.
// Decisions (docs/server.md): the prompt is the chat template's rendering encoded without added
// special tokens (as transformers' apply_chat_template does); max_tokens defaults to what is
// left of the context; tool_choice "none" hides the tools from the template and turns the
// parser off; "required" and a named choice are enforced by appending the model's tool-call
// opening to the prompt (chat/tool_choice.h; a named choice also shows the template only that
// tool), and the output is parsed with that forced text in front of it.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "chat/reasoning_parser.h"
#include "chat/tool_parser.h"
#include "server/schemas.h"
#include "server/state.h"

namespace hearth::server {

struct PreparedChat {
  GenerationRequest gen;
  std::string prompt_text;    // includes forced_prefix
  std::string forced_prefix;  // tool-call opening appended after the generation prompt
  bool starts_in_reasoning = false;
  chat::ToolCallFormat tool_format = chat::ToolCallFormat::None;
  nlohmann::json tools;  // for argument types
  bool parallel_tool_calls = true;
};

// Throws ApiError 400 for template errors (raise_exception included) and context overflows.
// for_generation false: only render and tokenize (counting endpoints), without the context and
// sampling checks a generation needs.
PreparedChat prepare_chat(const ServerState& state, const ServedModel& model,
                          const ChatRequest& request, bool for_generation = true);
// Context check and sampling for a tokenized prompt (also used by /v1/completions).
// context_limit > 0: a smaller context for this request (Ollama's options.num_ctx), checked and
// filled like the engine's; 0 or more than the engine's: the engine's context.
void finish_generation_request(const ServerState& state, const ServedModel& model,
                               GenerationRequest& gen, std::optional<int64_t> max_tokens,
                               const SamplingFields& sampling, int64_t context_limit = 0);

class ChatOutput {
 public:
  // Feeds the prepared forced prefix first: the model's output continues it.
  explicit ChatOutput(const PreparedChat& prepared);
  struct Events {
    std::string reasoning;
    std::string content;
    std::vector<chat::ToolCall> calls;
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  };
  Events push(const std::string& text);
  Events finish();
  size_t n_calls() const { return n_calls_; }

 private:
  void route(const chat::ReasoningSplit& split, Events& out, bool final);
  chat::ReasoningParser reasoning_;
  Events initial_;  // what the forced prefix released (normally nothing), sent with the first push
  std::optional<chat::ToolCallParser> tools_;
  bool parallel_;
  size_t n_calls_ = 0;
};

// "call_" / "toolu_" + 24 random alphanumerics.
std::string random_id(const char* prefix, size_t n = 24);

}  // namespace hearth::server
