// What every route handler shares: options, the engine (null until loaded), the chat template,
// metrics, the stored responses, and the stopping flag. Handlers only read it (the response
// store locks itself); the loader sets engine once, then ready.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "chat/template.h"
#include "chat/tool_parser.h"
#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/responses_store.h"

namespace hearth::server {

struct ServerOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t n_ctx = 0;    // 0: the model's
  std::string api_key;  // empty: no authentication
  size_t cache_mb = 8192;
  std::string device = "cpu";
  bool deterministic = false;    // LoadOptions::deterministic
  bool mmap = true;              // read CPU weights in place (false: copy into huge pages)
  int64_t max_running = 0;       // requests decoding together (0: the engine's default)
  int64_t max_batch_tokens = 0;  // tokens per step while requests decode (0: the engine's)
  size_t kv_budget_mb = 0;       // the running requests' states together (0: the engine's)
  std::function<void(size_t, size_t)> load_progress;  // EngineOptions::load_progress
  bool chat_page = true;                              // serve the chat page at /
  std::string web_dir;  // read the page from here instead of the built-in copy
  size_t max_body_bytes = size_t{32} << 20;
  int http_threads = 64;          // requests handled at once (the rest wait, in order)
  std::string cors_origin;        // "": no CORS; "*": any origin; else one origin
  int64_t request_timeout_s = 0;  // 0: none; else a generation ends with 504 after this long
  int64_t idle_timeout_s = 30;    // a kept-alive connection with no request is closed after this
  int64_t max_prompt_tokens = 0;  // 0: the context length; else prompts over it get a 400
  // /v1/responses kept for GET and previous_response_id (least recently used out first).
  size_t responses_max = 1000;                 // stored responses at most (0: none is kept)
  size_t responses_bytes = size_t{256} << 20;  // their JSON text at most
};

// Whose engine the server serves: its own (loaded by Server::load, or handed over), which stop()
// shuts down, or one shared with other users (a hearth::Runtime), which runs on after stop():
// the server then cancels only its own requests.
enum class EngineOwnership { Server, Shared };

struct ServerState {
  ServerOptions options;
  std::shared_ptr<Engine> engine;
  EngineOwnership engine_ownership = EngineOwnership::Server;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  std::atomic<int> running{0};
  std::string model_id;  // what /v1/models lists
  std::optional<chat::ChatTemplate> chat_template;
  std::string chat_template_source;
  chat::ToolCallFormat tool_format = chat::ToolCallFormat::None;
  Metrics metrics;
  ResponseStore responses;  // /v1/responses with store: true
  std::string load_error;
};

using Clock = std::chrono::steady_clock;

}  // namespace hearth::server
