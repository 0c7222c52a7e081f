#include "server/http_util.h"

#include "core/json_bounded.h"
#include "core/log.h"
#include "server/thread_latency.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void send_json(http::Response& res, const nlohmann::json& body, int status) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(http::Response& res, ApiStyle style, int status, const std::string& message,
                const std::string& param, const std::string& code) {
  send_json(res, error_body(style, status, message, param, code), status);
}

namespace {
// Compares in time that depends on the lengths only, so response timing does not reveal how
// much of a guessed key was right.
bool same_secret(std::string_view given, std::string_view key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ key[i % key.size()]);
  return diff == 0;
}
}  // namespace

bool check_auth(const ServerState& state, ApiStyle style, const http::Request& req,
                http::Response& res) {
  const std::string& key = state.options.api_key;
  if (key.empty()) return true;
  const std::string auth = req.header("authorization");
  const std::string_view bearer = "Bearer ";
  const bool bearer_ok = auth.size() > bearer.size() &&
                         auth.compare(0, bearer.size(), bearer) == 0 &&
                         same_secret(std::string_view(auth).substr(bearer.size()), key);
  if (bearer_ok || same_secret(req.header("x-api-key"), key)) return true;
  send_error(res, style, 401,
             style == ApiStyle::Anthropic
                 ? "invalid x-api-key"
                 : "invalid or missing API key (Authorization: Bearer KEY)",
             {}, "invalid_api_key");
  return false;
}

namespace {

void run_guarded(ServerState& state, ApiStyle style, const std::string& endpoint,
                 http::Response& res, const std::function<void()>& fn) {
  prefer_short_slices_for_this_thread();
  try {
    fn();
  } catch (const ApiError& e) {
    send_error(res, style, e.status, e.what(), e.param, e.code);
  } catch (const hearth::Error& e) {
    send_error(res, style, 400, e.what());
  } catch (const std::exception& e) {
    send_error(res, style, 500, std::string("internal error: ") + e.what());
  } catch (...) {
    send_error(res, style, 500, "internal error");
  }
  state.metrics.count_request(endpoint, res.status);
}

bool check_ready(ServerState& state, ApiStyle style, http::Response& res) {
  if (state.stopping) {
    send_error(res, style, 503, "the server is shutting down");
    return false;
  }
  if (!state.ready) {
    send_error(res, style, 503,
               state.load_error.empty() ? "the model is loading"
                                        : "the model failed to load: " + state.load_error);
    return false;
  }
  return true;
}

}  // namespace

http::Handler json_post(ServerState& state, ApiStyle style, std::string endpoint, JsonRoute fn) {
  return [&state, style, endpoint, fn](const http::Request& req, http::Response& res) {
    run_guarded(state, style, endpoint, res, [&] {
      if (!check_auth(state, style, req, res) || !check_ready(state, style, res)) return;
      ojson body;
      const JsonParseStatus parsed = parse_json_bounded(req.body, body);
      if (parsed == JsonParseStatus::TooDeep)
        throw ApiError(
            400, fmt::format("the request body nests JSON deeper than {} levels", kMaxJsonDepth));
      if (parsed == JsonParseStatus::Invalid)
        throw ApiError(400, req.body.empty() ? "the request body is empty: expected JSON"
                                             : "the request body is not valid JSON");
      if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
      fn(body, req, res);
    });
  };
}

http::Handler json_get(ServerState& state, ApiStyle style, std::string endpoint, bool needs_model,
                       std::function<void(const http::Request&, http::Response&)> fn) {
  return [&state, style, endpoint, needs_model, fn](const http::Request& req, http::Response& res) {
    run_guarded(state, style, endpoint, res, [&] {
      if (!check_auth(state, style, req, res)) return;
      if (needs_model && !check_ready(state, style, res)) return;
      fn(req, res);
    });
  };
}

std::string sse_data(const nlohmann::json& body) { return "data: " + dump_json(body) + "\n\n"; }

std::string sse_event(const std::string& event, const nlohmann::json& body) {
  return "event: " + event + "\ndata: " + dump_json(body) + "\n\n";
}

bool sse_write(http::BodyWriter& sink, const std::string& text) { return sink.write(text); }

nlohmann::json token_logprob_entry(const Engine& engine, int32_t token, float logprob) {
  std::string text;
  if (engine.tokenizer()) {
    const int32_t id[1] = {token};
    text = engine.tokenizer()->decode(id, false);
  }
  std::vector<int> bytes;
  for (unsigned char c : text) bytes.push_back(c);
  return {{"token", text}, {"logprob", logprob}, {"bytes", bytes}};
}

}  // namespace hearth::server
