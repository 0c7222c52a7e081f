#include "server/server.h"

#include <httplib.h>

#include <filesystem>

#include "core/log.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "server/task_queue.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

Server::Server(ServerOptions options) : http_(std::make_unique<httplib::Server>()) {
  state_.options = std::move(options);
}

Server::~Server() { stop(); }

std::string Server::url() const {
  const std::string& h = state_.options.host;
  const std::string host = h == "0.0.0.0" || h.empty()        ? "127.0.0.1"
                           : h.find(':') != std::string::npos ? "[" + h + "]"
                                                              : h;
  return fmt::format("http://{}:{}", host, state_.options.port);
}

void Server::start() {
  ServerState& s = state_;
  const int n_threads = std::max(4, s.options.http_threads);
  http_->new_task_queue = [n_threads] { return new LifoTaskQueue(size_t(n_threads)); };
  http_->set_payload_max_length(s.options.max_body_bytes);
  http_->set_keep_alive_max_count(1000);
  http_->set_read_timeout(30);
  http_->set_write_timeout(30);
  http_->set_tcp_nodelay(true);  // SSE deltas are small; do not let Nagle batch them
  http_->set_error_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const ApiStyle style =
        req.path.rfind("/v1/messages", 0) == 0 ? ApiStyle::Anthropic : ApiStyle::OpenAI;
    std::string msg =
        res.status == 404 ? "not found: " + req.method + " " + req.path
        : res.status == 413
            ? fmt::format("the request body is over the {} byte limit", s.options.max_body_bytes)
            : fmt::format("HTTP {}", res.status);
    send_error(res, style, res.status, msg);
  });
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          msg += std::string(": ") + e.what();
        } catch (...) {
        }
        send_error(res, ApiStyle::OpenAI, 500, msg);
      });
  register_openai_routes(*http_, s);
  register_anthropic_routes(*http_, s);
  register_misc_routes(*http_, s);

  if (s.options.port == 0) {
    const int port = http_->bind_to_any_port(s.options.host);
    if (port <= 0) fail("cannot listen on {}: bind failed", s.options.host);
    s.options.port = port;
  } else if (!http_->bind_to_port(s.options.host, s.options.port)) {
    fail("cannot listen on {}:{} (in use, or the address is not local)", s.options.host,
         s.options.port);
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
}

void Server::load() {
  try {
    EngineOptions eo;
    eo.model_dir = state_.options.model_dir;
    eo.device = state_.options.device;
    eo.n_ctx = state_.options.n_ctx;
    eo.cache_bytes = state_.options.cache_mb << 20;
    std::shared_ptr<Engine> engine = Engine::load(eo);
    std::string id =
        std::filesystem::path(state_.options.model_dir).lexically_normal().filename().string();
    if (id.empty())
      id = std::filesystem::path(state_.options.model_dir).parent_path().filename().string();
    set_engine(std::move(engine), id.empty() ? "hearth" : id);
  } catch (const std::exception& e) {
    state_.load_error = e.what();
    throw;
  }
}

void Server::set_engine(std::shared_ptr<Engine> engine, const std::string& model_id) {
  ServerState& s = state_;
  s.engine = std::move(engine);
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
  if (!thread_.joinable()) return;
  state_.stopping = true;
  if (state_.engine) state_.engine->shutdown();  // in-flight requests end now, with an error
  http_->stop();                                 // joins the handler threads
  thread_.join();
}

}  // namespace hearth::server
