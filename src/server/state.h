// What every route handler shares: options, the model or models served, metrics, the stored
// responses, and the stopping flag. A server serves one model (loaded at start, `model`) or
// several (`pool`: listed at start, loaded on demand, server/model_pool.h); a handler takes the
// model its request names with acquire_model() and holds it while it runs. Handlers only read
// the state (the response store and the pool lock themselves); the loader sets `model` once,
// then ready.
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
#include "server/errors.h"
#include "server/metrics.h"
#include "server/model_pool.h"
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
  int tensor_parallel = 1;       // LoadOptions::tensor_parallel
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

// A loaded model as the routes use it: its engine, its id, and its chat template parsed once.
struct ServedModel {
  std::string model_id;  // what /v1/models lists and responses echo
  std::string dir;       // its checkpoint directory ("" when not known: an engine handed over)
  std::shared_ptr<Engine> engine;
  std::optional<chat::ChatTemplate> chat_template;  // none: the chat endpoints answer 400
  std::string chat_template_source;
  chat::ToolCallFormat tool_format = chat::ToolCallFormat::None;
};

// The ServedModel of a loaded engine: its tokenizer's chat template parsed (a template that does
// not parse leaves the chat endpoints off, with a warning).
std::shared_ptr<ServedModel> make_served_model(std::shared_ptr<Engine> engine,
                                               const std::string& model_id,
                                               const std::string& dir = {});

// The model a request runs on, held until the handler returns.
class ModelRef {
 public:
  explicit ModelRef(std::shared_ptr<const ServedModel> model) : shared_(std::move(model)) {}
  explicit ModelRef(ModelLease<ServedModel> lease) : lease_(std::move(lease)) {}
  const ServedModel& operator*() const { return shared_ ? *shared_ : *lease_; }
  const ServedModel* operator->() const { return &**this; }

 private:
  std::shared_ptr<const ServedModel> shared_;
  ModelLease<ServedModel> lease_;
};

struct ServerState {
  ServerOptions options;
  std::shared_ptr<const ServedModel> model;      // one model: set once loaded
  std::unique_ptr<ModelPool<ServedModel>> pool;  // several: loaded on demand
  EngineOwnership engine_ownership = EngineOwnership::Server;
  std::atomic<bool> ready{false};
  std::atomic<bool> stopping{false};
  std::atomic<int> running{0};
  Metrics metrics;
  ResponseStore responses;  // /v1/responses with store: true
  std::string load_error;
};

using Clock = std::chrono::steady_clock;

// The model a request names (`model`; nullopt when it names none). With one model any name is
// served by it (as llama-server does: clients with a hard-coded name work); with several, the
// name must be one of them (ApiError 404 model_not_found; 400 when none is named), and the model
// is loaded first when it is not (ApiError 500 when that fails).
ModelRef acquire_model(ServerState& state, const std::optional<std::string>& name);
// The same for a request body's "model" field.
ModelRef acquire_model(ServerState& state, const nlohmann::ordered_json& body);
// What /v1/models (and Ollama's /api/tags) list: every model served, with its context (the
// engine's when loaded, else its config's) and whether it is loaded.
struct ListedModel {
  std::string id;
  int64_t context = 0;
  bool loaded = false;
};
std::vector<ListedModel> list_models(const ServerState& state);
// Calls fn for each loaded model (the pool's lock held: fn must be quick).
void for_each_loaded_model(const ServerState& state,
                           const std::function<void(const ServedModel&)>& fn);

}  // namespace hearth::server
