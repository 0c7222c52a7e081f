// Route registration, one function per API family (each in its own file).
#pragma once
#include "server/http/router.h"
#include "server/state.h"

namespace hearth::server {

void register_openai_routes(http::Router& http, ServerState& state);
void register_anthropic_routes(http::Router& http, ServerState& state);
void register_ollama_routes(http::Router& http, ServerState& state);
// /health, /metrics, /tokenize, /detokenize and the chat page.
void register_misc_routes(http::Router& http, ServerState& state);

}  // namespace hearth::server
