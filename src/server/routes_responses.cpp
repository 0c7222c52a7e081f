// OpenAI Responses API: POST /v1/responses (JSON, or SSE with `event:` lines), and the stored
// responses: GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items. A request runs
// through the chat pipeline (the template, tools, reasoning parsing, sampling, cancellation) like a
// chat completion; only the request's items and the output's shape differ (schemas_responses.h,
// responses_output.h). previous_response_id continues a stored response: the conversation is its
// input items, its output items and the new input, rendered again by the chat template, so the
// prompt starts with the previous prompt and output and the prompt cache reuses their state (no
// state of its own is kept here). Instructions are not carried over, as OpenAI documents.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <vector>

#include "core/json_bounded.h"
#include "server/chat_pipeline.h"
#include "server/http_util.h"
#include "server/responses_input_items.h"
#include "server/responses_output.h"
#include "server/routes.h"
#include "server/runner.h"
#include "server/schemas_responses.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

namespace {

std::string responses_dump(const ojson& j) {
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// OpenAI answers an unknown id with 404 and type invalid_request_error (not not_found_error).
void responses_not_found(http::Response& res, const std::string& message, const std::string& param,
                         const std::string& code = {}) {
  nlohmann::json e = error_body(ApiStyle::OpenAI, 404, message, param, code);
  e["error"]["type"] = "invalid_request_error";
  send_json(res, e, 404);
}

// Chat pipeline errors name chat fields; a Responses client knows input and max_output_tokens.
[[noreturn]] void responses_rethrow(const ApiError& e) {
  std::string message = e.what(), param = e.param;
  if (param == "messages") param = "input";
  if (param == "max_tokens") {
    param = "max_output_tokens";
    if (size_t at = message.find("max_tokens"); at != std::string::npos)
      message.replace(at, 10, "max_output_tokens");
  }
  throw ApiError(e.status, message, param, e.code);
}

bool responses_is_overflow(const ApiError& e) {
  return e.code == "context_length_exceeded" || e.code == "prompt_too_long";
}

// The conversation without the turns before the `k`-th user message after the first (system
// and developer messages are kept).
ojson responses_drop_turns(const ojson& items, size_t k) {
  std::vector<size_t> starts;
  bool seen_user = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const ojson& it = items[i];
    if (it.value("type", "") != "message" || it.value("role", "") != "user") continue;
    if (seen_user) starts.push_back(i);
    seen_user = true;
  }
  if (k == 0 || starts.empty()) return items;
  const size_t cut = starts[std::min(k, starts.size()) - 1];
  ojson out = ojson::array();
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string role = items[i].value("role", "");
    if (i >= cut ||
        (items[i].value("type", "") == "message" && (role == "system" || role == "developer")))
      out.push_back(items[i]);
  }
  return out;
}

size_t responses_turns(const ojson& items) {
  size_t users = 0;
  for (const ojson& it : items)
    users += it.value("type", "") == "message" && it.value("role", "") == "user";
  return users > 0 ? users - 1 : 0;
}

// Renders the conversation; with truncation "auto", a prompt that does not fit loses whole
// turns from the start (the fewest that make it fit, found by bisection), and `items` becomes
// what was kept.
PreparedChat responses_prepare(const ServerState& s, const ServedModel& model, ResponsesRequest& r,
                               ojson& items) {
  auto attempt = [&](const ojson& used) {
    r.chat.messages = responses_messages(used, r.instructions);
    return prepare_chat(s, model, r.chat);
  };
  try {
    try {
      return attempt(items);
    } catch (const ApiError& e) {
      if (!r.truncation_auto || !responses_is_overflow(e) || responses_turns(items) == 0) throw;
    }
    size_t lo = 1, hi = responses_turns(items), best = 0;
    while (lo <= hi) {
      const size_t mid = lo + (hi - lo) / 2;
      try {
        attempt(responses_drop_turns(items, mid));
        best = mid;
        hi = mid - 1;
      } catch (const ApiError& e) {
        if (!responses_is_overflow(e)) throw;
        lo = mid + 1;
      }
    }
    if (best == 0) return attempt(responses_drop_turns(items, responses_turns(items)));
    items = responses_drop_turns(items, best);
    return attempt(items);
  } catch (const ApiError& e) {
    responses_rethrow(e);
  }
}

// Output tokens up to the end of the reasoning: the generated text through "</think>" encoded
// again (the model's own tokens when its tokenization is canonical), or all of them when the
// output ended inside the reasoning.
int64_t responses_reasoning_tokens(const ServedModel& model, const GenerationResult& result,
                                   bool had_reasoning) {
  if (!had_reasoning) return 0;
  const int64_t all = result.usage.completion_tokens;
  const size_t close = result.text.find("</think>");
  if (close == std::string::npos || !model.engine->tokenizer()) return all;
  const auto n = model.engine->tokenizer()->encode(result.text.substr(0, close + 8), false).size();
  return std::min<int64_t>(all, int64_t(n));
}

void responses_keep(ServerState& s, const std::string& id, const ojson& items, const ojson& input,
                    const ojson& response) {
  auto entry = std::make_shared<StoredResponse>();
  entry->conversation = responses_dump(items);
  entry->response = responses_dump(response);
  responses_store_input(*entry, items, input);
  s.responses.put(id, std::move(entry));
}

// Everything a streamed response needs after the handler returns.
struct ResponsesJob {
  std::shared_ptr<const ModelRef> model;  // held until the response is complete
  ResponsesRequest request;
  ojson items;  // the conversation the response answers (stored with it)
  PreparedChat prepared;
  std::string id;
  int64_t created_at = 0;
};

ojson responses_final(const ResponsesJob& job, const GenerationResult& result,
                      const ResponsesOutput& out, const char* status) {
  const ServedModel& model = **job.model;
  ojson response = responses_object(
      job.request, job.id, job.created_at, model.model_id, status, out.items(),
      responses_usage(result.usage,
                      responses_reasoning_tokens(model, result, out.has_reasoning())));
  if (std::string(status) == "completed") response["completed_at"] = int64_t(std::time(nullptr));
  return response;
}

void create_response(ServerState& s, const ojson& body, const http::Request& req,
                     http::Response& res) {
  const auto arrival = Clock::now();
  auto job = std::make_shared<ResponsesJob>();
  job->request = parse_responses_request(body);
  job->model = std::make_shared<const ModelRef>(acquire_model(s, body));
  ResponsesRequest& r = job->request;
  job->items = ojson::array();
  if (r.previous_response_id) {
    const auto previous = s.responses.get(*r.previous_response_id);
    if (!previous) {
      responses_not_found(
          res, fmt::format("Previous response with id '{}' not found.", *r.previous_response_id),
          "previous_response_id", "previous_response_not_found");
      return;
    }
    ojson stored;
    ojson response;
    if (parse_json_bounded(previous->conversation, stored) != JsonParseStatus::Ok ||
        parse_json_bounded(previous->response, response) != JsonParseStatus::Ok)
      throw ApiError(500, "the stored response " + *r.previous_response_id + " is unreadable");
    job->items = std::move(stored);
    for (auto& item : response["output"]) job->items.push_back(std::move(item));
  }
  for (const auto& item : r.input) job->items.push_back(item);
  job->prepared = responses_prepare(s, **job->model, r, job->items);
  // Sampling fields the request left out show the values used (the model's defaults).
  const SamplingParams& used = job->prepared.gen.sampling;
  if (r.echo["temperature"].is_null())
    r.echo["temperature"] = std::round(used.temperature * 1e6) / 1e6;
  if (r.echo["top_p"].is_null()) r.echo["top_p"] = std::round(used.top_p * 1e6) / 1e6;
  job->id = random_id("resp_");
  job->created_at = int64_t(std::time(nullptr));

  if (!r.chat.stream) {
    EngineRequest er(s, *(*job->model)->engine, job->prepared.gen, arrival,
                     /*want_deltas=*/false);
    ChatOutput parsed(job->prepared);
    GenerationResult result = pump(er, &req, {});
    if (const auto failure = result_failure(s, result))
      throw ApiError(failure->status, failure->message);
    ResponsesOutput out(nullptr);
    out.add(parsed.push(result.text));  // the parsers give the same result for any split
    out.add(parsed.finish());
    const char* status = result.finish_reason == "length" ? "incomplete" : "completed";
    out.finish(status);
    const ojson response = responses_final(*job, result, out, status);
    if (r.store) responses_keep(s, job->id, job->items, r.input, response);
    res.status = 200;
    res.set_content(responses_dump(response), "application/json");
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_stream("text/event-stream", [&s, job, arrival, &req](http::BodyWriter& sink) {
    SseBatch batch(sink);
    ResponsesOutput out(&batch.buffer());
    const ojson start =
        responses_object(job->request, job->id, job->created_at, (*job->model)->model_id,
                         "in_progress", ojson::array(), nullptr);
    out.event("response.created", {{"response", start}});
    out.event("response.in_progress", {{"response", start}});
    batch.flush();  // the first bytes go out before the request is queued
    EngineRequest er(s, *(*job->model)->engine, job->prepared.gen, arrival);
    ChatOutput parsed(job->prepared);
    GenerationResult result = pump(
        er, &req,
        [&](const GenerationDelta& d) {
          out.add(parsed.push(d.text));
          return batch.ok();
        },
        [&] { return batch.keep_alive(); }, [&] { return batch.flush(); });
    if (const auto failure = result_failure(s, result)) {
      out.finish("incomplete", /*ensure_message=*/false);
      out.event("error",
                {{"code", "server_error"}, {"message", failure->message}, {"param", nullptr}});
      ojson failed = responses_final(*job, result, out, "failed");
      failed["error"] = {{"code", "server_error"}, {"message", failure->message}};
      out.event("response.failed", {{"response", failed}});
    } else {
      out.add(parsed.finish());
      const char* status = result.finish_reason == "length" ? "incomplete" : "completed";
      out.finish(status);
      const ojson response = responses_final(*job, result, out, status);
      // Stored before the client hears of it, so a follow-up sent at once finds it.
      if (job->request.store) responses_keep(s, job->id, job->items, job->request.input, response);
      out.event(std::string("response.") + status, {{"response", response}});
    }
    batch.flush();
  });
}

}  // namespace

void register_responses_routes(http::Router& http, ServerState& s) {
  http.post("/v1/responses", json_post(s, ApiStyle::OpenAI, "/v1/responses",
                                       [&s](const ojson& b, const http::Request& q,
                                            http::Response& r) { create_response(s, b, q, r); }));
  const std::string one = "/v1/responses/([^/]+)";
  http.get(one, json_get(s, ApiStyle::OpenAI, "/v1/responses/{id}", false,
                         [&s](const http::Request& req, http::Response& res) {
                           const auto entry = s.responses.get(req.matches[1]);
                           if (!entry)
                             return responses_not_found(
                                 res,
                                 fmt::format("Response with id '{}' not found.", req.matches[1]),
                                 "response_id");
                           res.status = 200;
                           res.set_content(entry->response, "application/json");
                         }));
  http.get(
      one + "/input_items",
      json_get(s, ApiStyle::OpenAI, "/v1/responses/{id}/input_items", false,
               [&s](const http::Request& req, http::Response& res) {
                 const ResponsesItemsQuery query = parse_responses_items_query(req.query_params());
                 const std::string& id = req.matches[1];
                 const auto entry = s.responses.get(id);
                 if (!entry)
                   return responses_not_found(
                       res, fmt::format("Response with id '{}' not found.", id), "response_id");
                 res.status = 200;
                 res.set_content(
                     responses_dump(responses_items_page(responses_stored_input(*entry), query)),
                     "application/json");
               }));
  // json_get: a handler without a body, whatever its method.
  http.del(one, json_get(s, ApiStyle::OpenAI, "/v1/responses/{id}", false,
                         [&s](const http::Request& req, http::Response& res) {
                           const std::string& id = req.matches[1];
                           if (!s.responses.erase(id))
                             return responses_not_found(
                                 res, fmt::format("Response with id '{}' not found.", id),
                                 "response_id");
                           send_json(res, {{"id", id}, {"object", "response"}, {"deleted", true}});
                         }));
}

}  // namespace hearth::server
