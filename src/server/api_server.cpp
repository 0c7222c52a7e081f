// hearth::ApiServer (include/hearth/server.h): the internal server::Server over the engine of a
// public Runtime (api/runtime_internal.h), shared rather than owned, so stop() leaves the
// Runtime running. Options are checked like `hearth serve`'s flags, under the struct's names.
#include <filesystem>

#include "api/runtime_internal.h"
#include "core/error.h"
#include "hearth/server.h"
#include "runtime/engine.h"
#include "server/server.h"

namespace hearth {

namespace {

server::ServerOptions server_options(const ApiServerOptions& o, const RuntimeOptions& runtime) {
  if (o.port < 0 || o.port > 65535)
    fail("ApiServerOptions::port must be in [0, 65535], got {}", o.port);
  if (o.http_threads < 0 || o.http_threads > 4096)
    fail("ApiServerOptions::http_threads must be in [1, 4096] (0: the default), got {}",
         o.http_threads);
  if (o.request_timeout_s < 0)
    fail("ApiServerOptions::request_timeout_s must be >= 0, got {}", o.request_timeout_s);
  if (o.idle_timeout_s < 1)
    fail("ApiServerOptions::idle_timeout_s must be >= 1, got {}", o.idle_timeout_s);
  if (o.max_prompt_tokens < 0)
    fail("ApiServerOptions::max_prompt_tokens must be >= 0, got {}", o.max_prompt_tokens);
  if (o.max_body_bytes == 0) fail("ApiServerOptions::max_body_bytes must be >= 1");
  if (!o.web_dir.empty() && !std::filesystem::is_directory(o.web_dir))
    fail("ApiServerOptions::web_dir: {} is not a directory", o.web_dir);
  server::ServerOptions s;
  s.host = o.host;
  s.port = o.port;
  s.api_key = o.api_key;
  s.cors_origin = o.cors_origin;
  s.http_threads = o.http_threads > 0
                       ? o.http_threads
                       : server::default_http_threads(runtime.parallel, runtime.device);
  s.request_timeout_s = o.request_timeout_s;
  s.idle_timeout_s = o.idle_timeout_s;
  s.max_body_bytes = size_t(o.max_body_bytes);
  s.max_prompt_tokens = o.max_prompt_tokens;
  s.chat_page = o.chat_page;
  s.responses_max = size_t(o.responses_max);
  s.responses_bytes = size_t(o.responses_bytes);
  s.web_dir = o.web_dir;
  return s;  // the engine's fields stay unset: the Runtime loaded it (Server::load is not called)
}

}  // namespace

struct ApiServer::Impl {
  server::Server server;
  bool started = false;

  Impl(server::ServerOptions options, std::shared_ptr<Engine> engine, const std::string& model_id)
      : server(std::move(options)) {
    server.set_engine(std::move(engine), model_id, server::EngineOwnership::Shared);
  }
};

ApiServer::ApiServer(Runtime& runtime, ApiServerOptions options) {
  const RuntimeOptions& loaded = RuntimeInternals::options(runtime);
  const std::string model_id =
      options.model_id.empty() ? server::model_id_for(loaded.model) : options.model_id;
  impl_ = std::make_unique<Impl>(server_options(options, loaded), RuntimeInternals::engine(runtime),
                                 model_id);
}

ApiServer::~ApiServer() = default;  // server::Server's destructor stops it

void ApiServer::start() {
  if (impl_->started) fail("ApiServer::start: this server was started or stopped already");
  impl_->started = true;
  impl_->server.start();
}

int ApiServer::port() const { return impl_->server.port(); }

std::string ApiServer::url() const { return impl_->server.url(); }

void ApiServer::stop() {
  impl_->started = true;  // stopped before it started: it never will
  impl_->server.stop();
}

}  // namespace hearth
