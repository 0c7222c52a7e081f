// Route registration, one function per API family (each in its own file).
#pragma once
#include <httplib.h>

#include "server/state.h"

namespace hearth::server {

void register_openai_routes(httplib::Server& http, ServerState& state);
void register_anthropic_routes(httplib::Server& http, ServerState& state);
// /health, /metrics, /tokenize, /detokenize and the chat page.
void register_misc_routes(httplib::Server& http, ServerState& state);

}  // namespace hearth::server
