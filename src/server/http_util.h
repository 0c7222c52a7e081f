// Helpers every route uses: the JSON handler wrapper (authentication, readiness, body parsing,
// error shapes, request metrics, no exception escapes), JSON/SSE writers and logprob formatting.
#pragma once
#include <functional>
#include <string>

#include "server/errors.h"
#include "server/http/router.h"
#include "server/schemas.h"
#include "server/state.h"

namespace hearth::server {

using JsonRoute = std::function<void(const ojson& body, const http::Request&, http::Response&)>;

// POST handler: checks the API key (Authorization: Bearer, or x-api-key), that the model is
// loaded (503 otherwise), parses the body (400 on malformed JSON), then runs `fn`; any
// exception becomes an error response in `style`.
http::Handler json_post(ServerState& state, ApiStyle style, std::string endpoint, JsonRoute fn);
// GET handler with the same checks (no body).
http::Handler json_get(ServerState& state, ApiStyle style, std::string endpoint, bool needs_model,
                       std::function<void(const http::Request&, http::Response&)> fn);

// False (and a 401 written) when an API key is set and the request lacks it.
bool check_auth(const ServerState& state, ApiStyle style, const http::Request& req,
                http::Response& res);

void send_json(http::Response& res, const nlohmann::json& body, int status = 200);
void send_error(http::Response& res, ApiStyle style, int status, const std::string& message,
                const std::string& param = {}, const std::string& code = {});

std::string sse_data(const nlohmann::json& body);                             // "data: {...}\n\n"
std::string sse_event(const std::string& event, const nlohmann::json& body);  // Anthropic style
bool sse_write(http::BodyWriter& sink, const std::string& text);

// A token's text as logprobs show it, with its UTF-8 bytes.
nlohmann::json token_logprob_entry(const Engine& engine, int32_t token, float logprob);

// The JSON dump used for responses: invalid UTF-8 (a model can emit any bytes) is replaced.
std::string dump_json(const nlohmann::json& j);

}  // namespace hearth::server
