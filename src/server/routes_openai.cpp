// OpenAI-compatible routes: POST /v1/chat/completions and /v1/completions (JSON or SSE ending in
// "data: [DONE]"), GET /v1/models. Streaming sends a role chunk first, then content /
// reasoning_content / tool_calls deltas, a chunk with finish_reason, and (stream_options.
// include_usage) a usage chunk with empty choices, as OpenAI does. A tool call is sent whole in
// one delta once its closing tag is seen (clients accumulate deltas either way). Per-token chunks
// (text without logprobs) come from pre-rendered SseTextChunks, and each wake-up's deltas go out
// in one write (server/sse.h).
#include <ctime>

#include "server/chat_pipeline.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "server/runner.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

namespace {

using nlohmann::json;

json openai_usage(const GenerationUsage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

// llama.cpp-style extra field: the engine's own view of the request's time.
json timings_json(const GenerationTimings& t) {
  return {{"queue_ms", t.queue_ms},
          {"prefill_ms", t.prefill_ms},
          {"ttft_ms", t.ttft_ms},
          {"decode_ms", t.decode_ms},
          {"decode_tokens", t.decode_tokens}};
}

// A body that carries the usage: a whole non-streamed response, or (with no choices) the last
// streamed chunk when stream_options.include_usage is set.
json usage_body(const std::string& id, const char* object, int64_t created,
                const std::string& model, json choices, const GenerationResult& result) {
  return {{"id", id},
          {"object", object},
          {"created", created},
          {"model", model},
          {"choices", std::move(choices)},
          {"usage", openai_usage(result.usage)},
          {"timings", timings_json(result.timings)}};
}

json chat_logprobs(const Engine& engine, const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const auto& lp : lps) {
    json e = token_logprob_entry(engine, lp.token, lp.logprob);
    json top = json::array();
    for (auto [id, v] : lp.top) top.push_back(token_logprob_entry(engine, id, v));
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return {{"content", content}};
}

// Legacy completions format: tokens, token_logprobs, top_logprobs (token → logprob maps).
json completion_logprobs(const Engine& engine, const std::vector<TokenLogprob>& lps,
                         size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  for (const auto& lp : lps) {
    const std::string t = token_logprob_entry(engine, lp.token, lp.logprob)["token"];
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (auto [id, v] : lp.top)
      top[token_logprob_entry(engine, id, v)["token"].get<std::string>()] = v;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += t.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json tool_calls_json(const std::vector<chat::ToolCall>& calls, size_t first_index,
                     bool with_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", random_id("call_")},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = first_index + i;
    out.push_back(c);
  }
  return out;
}

// A failed or interrupted generation as an HTTP error.
void throw_for_result(const ServerState& state, const GenerationResult& r) {
  if (auto f = result_failure(state, r)) throw ApiError(f->status, f->message);
}

std::string finish_reason(const GenerationResult& r, size_t n_calls) {
  if (n_calls > 0) return "tool_calls";
  return r.finish_reason;
}

json model_object(const ListedModel& m) {
  json o = {{"id", m.id}, {"object", "model"}, {"created", 0}, {"owned_by", "hearth"}};
  if (m.context > 0) o["max_model_len"] = m.context;
  return o;
}

void chat_completions(ServerState& s, const ojson& body, const http::Request& req,
                      http::Response& res) {
  const auto arrival = Clock::now();
  ChatRequest r = parse_openai_chat(body);
  auto served = std::make_shared<const ModelRef>(acquire_model(s, body));
  auto prepared = std::make_shared<PreparedChat>(prepare_chat(s, **served, r));
  const std::string id = random_id("chatcmpl-");
  const int64_t created = int64_t(std::time(nullptr));
  Engine& engine = *(*served)->engine;
  const std::string& model_id = (*served)->model_id;

  if (!r.stream) {
    EngineRequest er(s, engine, prepared->gen, arrival, /*want_deltas=*/false);
    ChatOutput out(*prepared);
    ChatOutput::Events all;
    auto add = [&](ChatOutput::Events ev) {
      all.reasoning += ev.reasoning;
      all.content += ev.content;
      for (auto& c : ev.calls) all.calls.push_back(std::move(c));
    };
    GenerationResult result = pump(er, &req, {});
    throw_for_result(s, result);
    add(out.push(result.text));  // the parsers give the same result for any split of the text
    add(out.finish());
    json message = {{"role", "assistant"}, {"content", all.content}};
    if (!all.calls.empty() && all.content.empty()) message["content"] = nullptr;
    if (!all.reasoning.empty()) message["reasoning_content"] = all.reasoning;
    if (!all.calls.empty()) message["tool_calls"] = tool_calls_json(all.calls, 0, false);
    json choice = {{"index", 0},
                   {"message", message},
                   {"logprobs", r.logprobs >= 0 ? chat_logprobs(engine, result.logprobs) : json()},
                   {"finish_reason", finish_reason(result, all.calls.size())}};
    send_json(res,
              usage_body(id, "chat.completion", created, model_id, json::array({choice}), result));
    return;
  }

  const bool include_usage = r.include_usage;
  const bool want_logprobs = r.logprobs >= 0;
  res.set_header("Cache-Control", "no-cache");
  res.set_stream("text/event-stream", [&s, served, prepared, id, created, include_usage,
                                       want_logprobs, arrival, &req](http::BodyWriter& sink) {
    Engine& engine = *(*served)->engine;
    const std::string& model_id = (*served)->model_id;
    auto chunk_body = [&](json delta, json finish, json logprobs = nullptr) {
      json c = {{"id", id},
                {"object", "chat.completion.chunk"},
                {"created", created},
                {"model", model_id},
                {"choices", json::array({{{"index", 0},
                                          {"delta", delta},
                                          {"logprobs", logprobs},
                                          {"finish_reason", finish}}})}};
      if (include_usage) c["usage"] = nullptr;
      return c;
    };
    auto chunk = [&](json delta, json finish, json logprobs = nullptr) {
      return sse_data(chunk_body(std::move(delta), std::move(finish), std::move(logprobs)));
    };
    const std::string slot(SseTextChunk::kSlot);
    const SseTextChunk content_chunk(chunk_body({{"content", slot}}, nullptr));
    const SseTextChunk reasoning_chunk(chunk_body({{"reasoning_content", slot}}, nullptr));
    SseBatch batch(sink);
    batch.add(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
    batch.flush();  // the first byte goes out before the request is queued
    EngineRequest er(s, engine, prepared->gen, arrival);
    ChatOutput out(*prepared);
    size_t n_calls = 0;
    std::string& buf = batch.buffer();
    auto send_events = [&](const ChatOutput::Events& ev, const std::vector<TokenLogprob>& lps) {
      json lp = want_logprobs && !lps.empty() ? chat_logprobs(engine, lps) : json();
      bool sent_lp = false;
      if (!ev.reasoning.empty()) reasoning_chunk.append(buf, ev.reasoning);
      if (!ev.content.empty()) {
        if (lp.is_null())
          content_chunk.append(buf, ev.content);
        else
          buf += chunk({{"content", ev.content}}, nullptr, lp);
        sent_lp = true;
      }
      if (!ev.calls.empty()) {
        buf += chunk({{"tool_calls", tool_calls_json(ev.calls, n_calls, true)}}, nullptr);
        n_calls += ev.calls.size();
      }
      // Logprobs of tokens whose text was held back or went elsewhere still reach the client.
      if (!sent_lp && !lp.is_null()) buf += chunk({{"content", ""}}, nullptr, lp);
      return batch.ok();
    };
    GenerationResult result = pump(
        er, &req,
        [&](const GenerationDelta& d) { return send_events(out.push(d.text), d.logprobs); },
        [&] { return batch.keep_alive(); }, [&] { return batch.flush(); });
    if (const auto failure = result_failure(s, result)) {
      batch.add(sse_data(error_body(ApiStyle::OpenAI, failure->status, failure->message)));
    } else {
      send_events(out.finish(), {});
      batch.add(chunk(json::object(), finish_reason(result, n_calls)));
      if (include_usage)
        batch.add(sse_data(
            usage_body(id, "chat.completion.chunk", created, model_id, json::array(), result)));
    }
    batch.add("data: [DONE]\n\n");
    batch.flush();
  });
}

void completions(ServerState& s, const ojson& body, const http::Request& req, http::Response& res) {
  const auto arrival = Clock::now();
  CompletionRequest r = parse_openai_completion(body);
  auto gen = std::make_shared<GenerationRequest>();
  auto served = std::make_shared<const ModelRef>(acquire_model(s, body));
  Engine& engine = *(*served)->engine;
  const std::string& model_id = (*served)->model_id;
  std::string prompt_text = r.prompt;
  if (r.prompt_tokens) {
    gen->prompt = *r.prompt_tokens;
    if (engine.tokenizer()) prompt_text = engine.tokenizer()->decode(gen->prompt, false);
  } else {
    if (!engine.tokenizer())
      bad_request("this model has no tokenizer: give the prompt as token ids", "prompt");
    gen->prompt = engine.tokenizer()->encode(r.prompt, true);
  }
  gen->stop = r.stop;
  gen->logprobs = r.logprobs;
  gen->ignore_eos = r.ignore_eos;
  finish_generation_request(s, **served, *gen, r.max_tokens, r.sampling);
  const std::string id = random_id("cmpl-");
  const int64_t created = int64_t(std::time(nullptr));
  const std::string echo = r.echo ? prompt_text : std::string();

  if (!r.stream) {
    EngineRequest er(s, engine, *gen, arrival, /*want_deltas=*/false);
    GenerationResult result = pump(er, &req, {});
    throw_for_result(s, result);
    json choice = {
        {"index", 0},
        {"text", echo + result.text},
        {"logprobs",
         r.logprobs >= 0 ? completion_logprobs(engine, result.logprobs, echo.size()) : json()},
        {"finish_reason", result.finish_reason}};
    send_json(res,
              usage_body(id, "text_completion", created, model_id, json::array({choice}), result));
    return;
  }
  const bool include_usage = r.include_usage;
  const bool want_logprobs = r.logprobs >= 0;
  res.set_header("Cache-Control", "no-cache");
  res.set_stream("text/event-stream", [&s, served, gen, id, created, include_usage, want_logprobs,
                                       echo, arrival, &req](http::BodyWriter& sink) {
    Engine& engine = *(*served)->engine;
    const std::string& model_id = (*served)->model_id;
    auto chunk_body = [&](const std::string& text, json finish, json logprobs = nullptr) {
      json c = {{"id", id},
                {"object", "text_completion"},
                {"created", created},
                {"model", model_id},
                {"choices", json::array({{{"index", 0},
                                          {"text", text},
                                          {"logprobs", logprobs},
                                          {"finish_reason", finish}}})}};
      if (include_usage) c["usage"] = nullptr;
      return c;
    };
    auto chunk = [&](const std::string& text, json finish, json logprobs = nullptr) {
      return sse_data(chunk_body(text, std::move(finish), std::move(logprobs)));
    };
    const SseTextChunk text_chunk(chunk_body(std::string(SseTextChunk::kSlot), nullptr));
    SseBatch batch(sink);
    std::string& buf = batch.buffer();
    if (!echo.empty()) {
      text_chunk.append(buf, echo);
      batch.flush();
    }
    size_t offset = echo.size();
    EngineRequest er(s, engine, *gen, arrival);
    GenerationResult result = pump(
        er, &req,
        [&](const GenerationDelta& d) {
          if (want_logprobs)
            buf += chunk(d.text, nullptr, completion_logprobs(engine, d.logprobs, offset));
          else
            text_chunk.append(buf, d.text);
          offset += d.text.size();
          return batch.ok();
        },
        [&] { return batch.keep_alive(); }, [&] { return batch.flush(); });
    if (const auto failure = result_failure(s, result)) {
      batch.add(sse_data(error_body(ApiStyle::OpenAI, failure->status, failure->message)));
    } else {
      batch.add(chunk("", result.finish_reason));
      if (include_usage)
        batch.add(
            sse_data(usage_body(id, "text_completion", created, model_id, json::array(), result)));
    }
    batch.add("data: [DONE]\n\n");
    batch.flush();
  });
}

}  // namespace

void register_openai_routes(http::Router& http, ServerState& s) {
  http.post("/v1/chat/completions",
            json_post(s, ApiStyle::OpenAI, "/v1/chat/completions",
                      [&s](const ojson& b, const http::Request& q, http::Response& r) {
                        chat_completions(s, b, q, r);
                      }));
  http.post("/v1/completions", json_post(s, ApiStyle::OpenAI, "/v1/completions",
                                         [&s](const ojson& b, const http::Request& q,
                                              http::Response& r) { completions(s, b, q, r); }));
  http.get("/v1/models",
           json_get(s, ApiStyle::OpenAI, "/v1/models", false,
                    [&s](const http::Request&, http::Response& res) {
                      json data = json::array();
                      for (const ListedModel& m : list_models(s)) data.push_back(model_object(m));
                      send_json(res, {{"object", "list"}, {"data", data}});
                    }),
           http::RunOn::IoThread);
  // Ids may hold a slash (ORG/NAME of the Hugging Face cache).
  http.get(R"(/v1/models/(.+))",
           json_get(s, ApiStyle::OpenAI, "/v1/models/{id}", false,
                    [&s](const http::Request& req, http::Response& res) {
                      const std::string id = req.matches[1];
                      for (const ListedModel& m : list_models(s))
                        if (m.id == id) return send_json(res, model_object(m));
                      send_error(res, ApiStyle::OpenAI, 404,
                                 "The model '" + id + "' does not exist", "model",
                                 "model_not_found");
                    }),
           http::RunOn::IoThread);
}

}  // namespace hearth::server
