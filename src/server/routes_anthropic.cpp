// Anthropic Messages API: POST /v1/messages, JSON or SSE with its event grammar: message_start,
// ping, then per content block content_block_start / content_block_delta (thinking_delta,
// text_delta, input_json_delta) / content_block_stop, then message_delta (stop_reason, usage)
// and message_stop. Blocks are opened in output order: thinking, text, tool_use.
// usage: input_tokens counts the prompt tokens not read from the prompt cache,
// cache_read_input_tokens the ones that were (Anthropic's split).
#include <ctime>

#include "core/json_bounded.h"
#include "server/chat_pipeline.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "server/runner.h"

namespace hearth::server {

namespace {

using nlohmann::json;

std::string stop_reason(const GenerationResult& r, size_t n_calls) {
  if (n_calls > 0) return "tool_use";
  if (r.finish_reason == "length") return "max_tokens";
  if (!r.stop_string.empty()) return "stop_sequence";
  return "end_turn";
}

json anthropic_usage(const GenerationUsage& u) {
  return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
          {"output_tokens", u.completion_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens}};
}

json tool_input(const chat::ToolCall& c) {
  const json input = parse_json_or_discarded<json>(c.arguments);
  return input.is_object() ? input : json::object();
}

// Streams one message's content blocks, opening and closing them as the output changes kind.
class BlockWriter {
 public:
  explicit BlockWriter(http::BodyWriter& sink) : sink_(sink) {}
  bool ok() const { return ok_; }
  void write(const std::string& event, const json& body) {
    ok_ = ok_ && sse_write(sink_, sse_event(event, body));
  }
  void delta(const std::string& kind, const std::string& text) {
    if (text.empty()) return;
    if (open_ != kind) {
      close();
      json block = kind == "thinking"
                       ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                       : json{{"type", "text"}, {"text", ""}};
      write("content_block_start",
            {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
      open_ = kind;
    }
    json d = kind == "thinking" ? json{{"type", "thinking_delta"}, {"thinking", text}}
                                : json{{"type", "text_delta"}, {"text", text}};
    write("content_block_delta",
          {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }
  void tool(const chat::ToolCall& c) {
    close();
    write("content_block_start", {{"type", "content_block_start"},
                                  {"index", index_},
                                  {"content_block",
                                   {{"type", "tool_use"},
                                    {"id", random_id("toolu_")},
                                    {"name", c.name},
                                    {"input", json::object()}}}});
    write("content_block_delta",
          {{"type", "content_block_delta"},
           {"index", index_},
           {"delta", {{"type", "input_json_delta"}, {"partial_json", tool_input(c).dump()}}}});
    open_ = "tool_use";
    close();
  }
  void close() {
    if (open_.empty()) return;
    if (open_ == "thinking")
      write("content_block_delta", {{"type", "content_block_delta"},
                                    {"index", index_},
                                    {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
    write("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_.clear();
    ++index_;
  }

 private:
  http::BodyWriter& sink_;
  std::string open_;
  int index_ = 0;
  bool ok_ = true;
};

void messages(ServerState& s, const ojson& body, const http::Request& req, http::Response& res) {
  const auto arrival = Clock::now();
  ChatRequest r = parse_anthropic_messages(body);
  auto served = std::make_shared<const ModelRef>(acquire_model(s, body));
  auto prepared = std::make_shared<PreparedChat>(prepare_chat(s, **served, r));
  const std::string id = random_id("msg_");
  const std::string model = body.contains("model") && body["model"].is_string()
                                ? body["model"].get<std::string>()
                                : (*served)->model_id;

  if (!r.stream) {
    EngineRequest er(s, *(*served)->engine, prepared->gen, arrival, /*want_deltas=*/false);
    ChatOutput out(*prepared);
    std::string reasoning, text;
    std::vector<chat::ToolCall> calls;
    auto add = [&](ChatOutput::Events ev) {
      reasoning += ev.reasoning;
      text += ev.content;
      for (auto& c : ev.calls) calls.push_back(std::move(c));
    };
    GenerationResult result = pump(er, &req, {});
    if (const auto failure = result_failure(s, result))
      throw ApiError(failure->status, failure->message);
    add(out.push(result.text));  // the parsers give the same result for any split of the text
    add(out.finish());
    json content = json::array();
    if (!reasoning.empty())
      content.push_back({{"type", "thinking"}, {"thinking", reasoning}, {"signature", ""}});
    if (!text.empty()) content.push_back({{"type", "text"}, {"text", text}});
    for (const auto& c : calls)
      content.push_back({{"type", "tool_use"},
                         {"id", random_id("toolu_")},
                         {"name", c.name},
                         {"input", tool_input(c)}});
    send_json(res,
              {{"id", id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model},
               {"content", content},
               {"stop_reason", stop_reason(result, calls.size())},
               {"stop_sequence", result.stop_string.empty() ? json() : json(result.stop_string)},
               {"usage", anthropic_usage(result.usage)}});
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_stream("text/event-stream", [&s, served, prepared, id, model, arrival,
                                       &req](http::BodyWriter& sink) {
    BlockWriter w(sink);
    const int64_t n_prompt = int64_t(prepared->gen.prompt.size());
    w.write("message_start", {{"type", "message_start"},
                              {"message",
                               {{"id", id},
                                {"type", "message"},
                                {"role", "assistant"},
                                {"model", model},
                                {"content", json::array()},
                                {"stop_reason", nullptr},
                                {"stop_sequence", nullptr},
                                {"usage", {{"input_tokens", n_prompt}, {"output_tokens", 0}}}}}});
    w.write("ping", {{"type", "ping"}});
    EngineRequest er(s, *(*served)->engine, prepared->gen, arrival);
    ChatOutput out(*prepared);
    size_t n_calls = 0;
    auto send = [&](const ChatOutput::Events& ev) {
      w.delta("thinking", ev.reasoning);
      w.delta("text", ev.content);
      for (const auto& c : ev.calls) w.tool(c), ++n_calls;
      return w.ok();
    };
    GenerationResult result = pump(
        er, &req, [&](const GenerationDelta& d) { return send(out.push(d.text)); },
        [&] {
          w.write("ping", {{"type", "ping"}});
          return w.ok();
        });
    if (const auto failure = result_failure(s, result)) {
      w.write("error", error_body(ApiStyle::Anthropic, failure->status, failure->message));
    } else {
      send(out.finish());
      w.close();
      w.write(
          "message_delta",
          {{"type", "message_delta"},
           {"delta",
            {{"stop_reason", stop_reason(result, n_calls)},
             {"stop_sequence", result.stop_string.empty() ? json() : json(result.stop_string)}}},
           {"usage", anthropic_usage(result.usage)}});
      w.write("message_stop", {{"type", "message_stop"}});
    }
  });
}

}  // namespace

void register_anthropic_routes(http::Router& http, ServerState& s) {
  http.post("/v1/messages", json_post(s, ApiStyle::Anthropic, "/v1/messages",
                                      [&s](const ojson& b, const http::Request& q,
                                           http::Response& r) { messages(s, b, q, r); }));
  http.post("/v1/messages/count_tokens",
            json_post(s, ApiStyle::Anthropic, "/v1/messages/count_tokens",
                      [&s](const ojson& b, const http::Request&, http::Response& res) {
                        ojson body = b;
                        if (!body.contains("max_tokens")) body["max_tokens"] = 1;
                        ChatRequest r = parse_anthropic_messages(body);
                        r.max_tokens.reset();
                        const ModelRef m = acquire_model(s, b);
                        PreparedChat p = prepare_chat(s, *m, r, /*for_generation=*/false);
                        send_json(res, {{"input_tokens", p.gen.prompt.size()}});
                      }));
}

}  // namespace hearth::server
