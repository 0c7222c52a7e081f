// Route registration, one function per API family (each in its own file).
#pragma once
#include "server/http/router.h"
#include "server/state.h"

namespace hearth::server {

void register_openai_routes(http::Router& http, ServerState& state);
void register_anthropic_routes(http::Router& http, ServerState& state);
// /v1/embeddings.
void register_embedding_routes(http::Router& http, ServerState& state);
// POST /v1/responses, GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items.
void register_responses_routes(http::Router& http, ServerState& state);
// Ollama's /api/*.
void register_ollama_routes(http::Router& http, ServerState& state);
// /health, /metrics, /tokenize, /detokenize and the chat page.
void register_misc_routes(http::Router& http, ServerState& state);

}  // namespace hearth::server
