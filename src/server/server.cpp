#include "server/server.h"

#include <algorithm>
#include <filesystem>

#include "core/log.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

Server::Server(ServerOptions options) { state_.options = std::move(options); }

Server::~Server() { stop(); }

std::string Server::url() const {
  const std::string& h = state_.options.host;
  const std::string host = h == "0.0.0.0" || h.empty()        ? "127.0.0.1"
                           : h == "::"                        ? "[::1]"
                           : h.find(':') != std::string::npos ? "[" + h + "]"
                                                              : h;
  return fmt::format("http://{}:{}", host, state_.options.port);
}

void Server::start() {
  ServerState& s = state_;
  http::HttpOptions ho;
  ho.host = s.options.host;
  ho.port = s.options.port;
  ho.max_body_bytes = s.options.max_body_bytes;
  ho.worker_threads = std::max(4, s.options.http_threads);
  ho.cors_origin = s.options.cors_origin;
  if (s.options.idle_timeout_s > 0)
    ho.idle_timeout = std::chrono::seconds(s.options.idle_timeout_s);
  http::Router router;
  register_openai_routes(router, s);
  register_anthropic_routes(router, s);
  register_ollama_routes(router, s);
  register_misc_routes(router, s);
  auto on_error = [&s](const http::Request& req, http::Response& res, int status,
                       const std::string& message) {
    const ApiStyle style = req.path.rfind("/v1/messages", 0) == 0 ? ApiStyle::Anthropic
                           : req.path.rfind("/api/", 0) == 0      ? ApiStyle::Ollama
                                                                  : ApiStyle::OpenAI;
    send_error(res, style, status, message);
    // One label for every path the routes do not know, so hostile paths cannot grow /metrics.
    s.metrics.count_request("(http)", status);
  };
  http_ = std::make_unique<http::HttpServer>(ho, std::move(router), on_error);
  http_->start();
  s.options.port = http_->port();
}

void Server::load() {
  try {
    EngineOptions eo;
    eo.model_dir = state_.options.model_dir;
    eo.device = state_.options.device;
    eo.mmap = state_.options.mmap;
    eo.deterministic = state_.options.deterministic;
    eo.max_running = state_.options.max_running;
    eo.max_step_tokens = state_.options.max_batch_tokens;
    eo.kv_budget_bytes = state_.options.kv_budget_mb << 20;
    eo.n_ctx = state_.options.n_ctx;
    eo.cache_bytes = state_.options.cache_mb << 20;
    std::shared_ptr<Engine> engine = Engine::load(eo);
    set_engine(std::move(engine), model_id_for(state_.options.model_dir));
  } catch (const std::exception& e) {
    state_.load_error = e.what();
    throw;
  }
}

void Server::set_engine(std::shared_ptr<Engine> engine, const std::string& model_id,
                        EngineOwnership ownership) {
  ServerState& s = state_;
  s.engine = std::move(engine);
  s.engine_ownership = ownership;
  s.model_id = model_id;
  if (const Tokenizer* tok = s.engine->tokenizer()) {
    s.chat_template_source = tok->chat_template();
    if (!s.chat_template_source.empty()) {
      try {
        s.chat_template = chat::ChatTemplate::parse(s.chat_template_source);
        s.tool_format = chat::detect_tool_call_format(s.chat_template_source);
      } catch (const std::exception& e) {
        log(LogLevel::Warn, "the model's chat template does not parse ({}); chat endpoints are off",
            e.what());
      }
    }
  }
  s.ready = true;
}

void Server::stop() {
  if (!http_ || state_.stopping.exchange(true)) return;
  // In-flight requests end now, with an error. A shared engine runs on: each handler cancels its
  // own request once it sees `stopping` (runner.cpp).
  if (state_.engine && state_.engine_ownership == EngineOwnership::Server)
    state_.engine->shutdown();
  http_->stop();  // joins the handler threads
}

std::string model_id_for(const std::string& model_dir) {
  std::string id = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (id.empty()) id = std::filesystem::path(model_dir).parent_path().filename().string();
  return id.empty() ? "hearth" : id;
}

int default_http_threads(int64_t max_running, const std::string& device) {
  const int64_t running = max_running > 0 ? max_running : default_max_running(device == "cpu");
  return int(std::clamp<int64_t>(running + 32, 64, 4096));
}

}  // namespace hearth::server
