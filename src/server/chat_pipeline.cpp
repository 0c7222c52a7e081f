#include "server/chat_pipeline.h"

#include <random>
#include <utility>

#include "chat/tool_choice.h"
#include "server/errors.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

std::string random_id(const char* prefix, size_t n) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = prefix;
  for (size_t i = 0; i < n; ++i) id += alphabet[rng() % (sizeof alphabet - 1)];
  return id;
}

void finish_generation_request(const ServerState& state, const ServedModel& model,
                               GenerationRequest& gen, std::optional<int64_t> max_tokens,
                               const SamplingFields& sampling, int64_t context_limit) {
  const Engine& engine = *model.engine;
  const bool limited = context_limit > 0 && context_limit < engine.n_ctx();
  const int64_t n_ctx = limited ? context_limit : engine.n_ctx();
  const char* context_name =
      limited ? "the context asked for (num_ctx)" : "this model's maximum context length";
  const int64_t n_prompt = int64_t(gen.prompt.size());
  if (n_prompt == 0) bad_request("the prompt is empty after tokenization", "messages");
  const int64_t limit = state.options.max_prompt_tokens;
  if (limit > 0 && n_prompt > limit)
    bad_request(fmt::format("the prompt has {} tokens; this server takes at most {} "
                            "(--max-prompt-tokens)",
                            n_prompt, limit),
                "messages", "prompt_too_long");
  if (n_prompt >= n_ctx)
    bad_request(
        fmt::format("{} is {} tokens, but the prompt has {} tokens", context_name, n_ctx, n_prompt),
        "messages", "context_length_exceeded");
  // Compared as max_tokens > room, not as a sum: a client's max_tokens near 2^63 would overflow.
  if (max_tokens && *max_tokens > n_ctx - n_prompt)
    bad_request(fmt::format("{} is {} tokens; the prompt has {} tokens and max_tokens is {} ({} in "
                            "total)",
                            context_name, n_ctx, n_prompt, *max_tokens,
                            double(n_prompt) + double(*max_tokens)),
                "max_tokens", "context_length_exceeded");
  gen.max_tokens = max_tokens ? *max_tokens : n_ctx - n_prompt;
  gen.sampling = sampling.apply(engine.default_sampling());
  try {
    engine.validate(gen);
  } catch (const ApiError&) {
    throw;
  } catch (const hearth::Error& e) {
    bad_request(e.what());
  }
}

PreparedChat prepare_chat(const ServerState& state, const ServedModel& model, const ChatRequest& r,
                          bool for_generation) {
  if (!model.chat_template || !model.engine->tokenizer())
    bad_request("this model has no chat template (tokenizer_config.json); use /v1/completions");
  const Tokenizer& tok = *model.engine->tokenizer();
  PreparedChat p;
  chat::ChatInputs in;
  in.messages = r.messages;
  const bool use_tools = !r.tools.is_null() && r.tool_choice != "none";
  if (use_tools) {
    if (r.tool_choice == "named") {
      in.tools = ojson::array();
      for (const auto& t : r.tools)
        if (t["function"].value("name", "") == r.tool_choice_name) in.tools.push_back(t);
    } else {
      in.tools = r.tools;
    }
  }
  in.add_generation_prompt = true;
  in.special_tokens["bos_token"] = tok.bos_token();
  in.special_tokens["eos_token"] = tok.eos_token();
  in.special_tokens["pad_token"] = tok.pad_token();
  in.kwargs = r.template_kwargs;
  try {
    p.prompt_text = chat::render_chat(*model.chat_template, in);
  } catch (const chat::TemplateRaise& e) {
    bad_request(std::string("the chat template rejected the request: ") + e.what(), "messages");
  } catch (const hearth::Error& e) {
    bad_request(std::string("rendering the chat template failed: ") + e.what(), "messages");
  }
  p.starts_in_reasoning = chat::prompt_opens_reasoning(p.prompt_text);
  if (use_tools && (r.tool_choice == "required" || r.tool_choice == "named")) {
    if (model.tool_format == chat::ToolCallFormat::None)
      bad_request("tool_choice '" + r.tool_choice +
                      "' cannot be enforced: this model's chat template has no known tool-call "
                      "format (use \"auto\")",
                  "tool_choice");
    p.forced_prefix = chat::forced_tool_call_prefix(
        model.tool_format, r.tool_choice == "named" ? r.tool_choice_name : std::string(),
        model.chat_template_source, p.starts_in_reasoning);
    p.prompt_text += p.forced_prefix;
  }
  p.gen.prompt = tok.encode(p.prompt_text, false);
  if (use_tools) {
    p.tool_format = model.tool_format;
    p.tools = nlohmann::json::parse(in.tools.dump());
  }
  p.parallel_tool_calls = r.parallel_tool_calls;
  p.gen.stop = r.stop;
  p.gen.ignore_eos = r.ignore_eos;
  p.gen.logprobs = r.logprobs;
  p.gen.skip_special_tokens = !chat::tool_call_format_needs_special_tokens(p.tool_format);
  if (for_generation) finish_generation_request(state, model, p.gen, r.max_tokens, r.sampling);
  return p;
}

ChatOutput::ChatOutput(const PreparedChat& p)
    : reasoning_(p.starts_in_reasoning), parallel_(p.parallel_tool_calls) {
  if (p.tool_format != chat::ToolCallFormat::None) tools_.emplace(p.tool_format, p.tools);
  if (!p.forced_prefix.empty()) initial_ = push(p.forced_prefix);
}

void ChatOutput::route(const chat::ReasoningSplit& split, Events& out, bool final) {
  out.reasoning += split.reasoning;
  if (!tools_) {
    out.content += split.content;
    return;
  }
  std::vector<chat::ToolCall> calls;
  out.content += tools_->push(split.content, calls);
  if (final) out.content += tools_->finish(calls);
  for (auto& c : calls) {
    // parallel_tool_calls: false keeps the first call only.
    if (!parallel_ && n_calls_ > 0) continue;
    ++n_calls_;
    out.calls.push_back(std::move(c));
  }
}

ChatOutput::Events ChatOutput::push(const std::string& text) {
  Events out = std::exchange(initial_, Events{});
  route(reasoning_.push(text), out, false);
  return out;
}

ChatOutput::Events ChatOutput::finish() {
  Events out = std::exchange(initial_, Events{});
  route(reasoning_.finish(), out, true);
  return out;
}

}  // namespace hearth::server
