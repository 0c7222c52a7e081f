// hearth's HTTP server: the OpenAI, Anthropic and service routes over one Engine, served by the
// event-driven HTTP layer in server/http/. Lifecycle: start() binds and serves at once (/health
// says 503 "loading"), load() or set_engine() makes it ready, stop() refuses new requests, ends
// in-flight generations (streams get an error event, others a 503) and joins every handler, so
// nothing hangs. Programs outside the project use it through include/hearth/server.h.
#pragma once
#include <memory>
#include <string>

#include "server/http/http_server.h"
#include "server/state.h"

namespace hearth::server {

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (port 0: any free port); throws hearth::Error naming them on failure.
  void start();
  // Loads the model named by the options (blocking). On failure /health reports the error and
  // this throws.
  void load();
  // Serves an engine built elsewhere (tests, a hearth::Runtime's); state.h says what ownership
  // changes at stop().
  void set_engine(std::shared_ptr<Engine> engine, const std::string& model_id,
                  EngineOwnership ownership = EngineOwnership::Server);
  // Serves several models instead, loaded when a request names one (at most max_loaded at once,
  // and max_bytes of checkpoints, 0: no cap; server/model_pool.h). Ready at once.
  void set_models(std::vector<ModelEntry> models, size_t max_loaded, uint64_t max_bytes);
  void stop();

  int port() const { return state_.options.port; }
  std::string url() const;
  ServerState& state() { return state_; }

 private:
  ServerState state_;
  std::unique_ptr<http::HttpServer> http_;
};

// What /v1/models lists for a model loaded from `model_dir`: the directory's name, or ORG/NAME
// for a snapshot of the Hugging Face cache (.../models--ORG--NAME/snapshots/COMMIT).
std::string model_id_for(const std::string& model_dir);

// Handler threads for a server whose engine runs `max_running` requests at once (0: the engine's
// default on `device`): a streamed request holds its thread while it generates, so every request
// the engine can run may stream, with room for the short ones (health, models, metrics) beside.
int default_http_threads(int64_t max_running, const std::string& device);

}  // namespace hearth::server
