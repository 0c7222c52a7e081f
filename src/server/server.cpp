#include "server/server.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/log.h"
#include "hub/hf_cache.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

Server::Server(ServerOptions options) {
  state_.options = std::move(options);
  state_.responses.set_limits(state_.options.responses_max, state_.options.responses_bytes);
}

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
  register_embedding_routes(router, s);
  register_responses_routes(router, s);
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

namespace {

std::shared_ptr<Engine> load_engine(const ServerOptions& o, const std::string& dir,
                                    bool with_progress) {
  EngineOptions eo;
  eo.model_dir = dir;
  eo.device = o.device;
  eo.mmap = o.mmap;
  eo.deterministic = o.deterministic;
  eo.tensor_parallel = o.tensor_parallel;
  eo.max_running = o.max_running;
  eo.max_step_tokens = o.max_batch_tokens;
  eo.kv_budget_bytes = o.kv_budget_mb << 20;
  eo.n_ctx = o.n_ctx;
  eo.cache_bytes = o.cache_mb << 20;
  if (with_progress) eo.load_progress = o.load_progress;
  return Engine::load(eo);
}

}  // namespace

void Server::load() {
  try {
    const std::string& dir = state_.options.model_dir;
    state_.model =
        make_served_model(load_engine(state_.options, dir, true), model_id_for(dir), dir);
    state_.ready = true;
  } catch (const std::exception& e) {
    state_.load_error = e.what();
    throw;
  }
}

void Server::set_engine(std::shared_ptr<Engine> engine, const std::string& model_id,
                        EngineOwnership ownership) {
  state_.engine_ownership = ownership;
  state_.model = make_served_model(std::move(engine), model_id);
  state_.ready = true;
}

void Server::set_models(std::vector<ModelEntry> models, size_t max_loaded, uint64_t max_bytes) {
  const ServerOptions& o = state_.options;
  state_.pool = std::make_unique<ModelPool<ServedModel>>(
      std::move(models), std::max<size_t>(max_loaded, 1), max_bytes, [&o](const ModelEntry& e) {
        log(LogLevel::Info, "loading {} from {}", e.id, e.dir);
        return make_served_model(load_engine(o, e.dir, false), e.id, e.dir);
      });
  state_.ready = true;
}

void Server::stop() {
  if (!http_ || state_.stopping.exchange(true)) return;
  // In-flight requests end now, with an error. A shared engine runs on: each handler cancels its
  // own request once it sees `stopping` (runner.cpp).
  // Shut down outside the pool's lock: a shutdown joins the engine's worker.
  if (state_.engine_ownership == EngineOwnership::Server) {
    std::vector<std::shared_ptr<Engine>> engines;
    for_each_loaded_model(state_, [&](const ServedModel& m) { engines.push_back(m.engine); });
    for (const auto& e : engines) e->shutdown();
  }
  http_->stop();  // joins the handler threads
}

std::shared_ptr<ServedModel> make_served_model(std::shared_ptr<Engine> engine,
                                               const std::string& model_id,
                                               const std::string& dir) {
  auto m = std::make_shared<ServedModel>();
  m->model_id = model_id;
  m->dir = dir;
  m->engine = std::move(engine);
  if (const Tokenizer* tok = m->engine->tokenizer()) {
    m->chat_template_source = tok->chat_template();
    if (!m->chat_template_source.empty()) {
      try {
        m->chat_template = chat::ChatTemplate::parse(m->chat_template_source);
        m->tool_format = chat::detect_tool_call_format(m->chat_template_source);
      } catch (const std::exception& e) {
        log(LogLevel::Warn, "{}: the chat template does not parse ({}); its chat endpoints are off",
            model_id, e.what());
      }
    }
  }
  return m;
}

ModelRef acquire_model(ServerState& s, const std::optional<std::string>& name) {
  if (!s.pool) return ModelRef(s.model);
  const auto& entries = s.pool->entries();
  if (!name || name->empty()) {
    std::string ids;
    for (size_t i = 0; i < entries.size() && i < 8; ++i) ids += (i ? ", " : "") + entries[i].id;
    if (entries.size() > 8) ids += ", ...";
    throw ApiError(
        400,
        fmt::format("model is required: this server serves {} models ({})", entries.size(), ids),
        "model");
  }
  const ModelEntry* entry = s.pool->find(*name);
  if (!entry)
    throw ApiError(404,
                   fmt::format("The model '{}' does not exist (GET /v1/models lists them)", *name),
                   "model", "model_not_found");
  try {
    return ModelRef(s.pool->acquire(*entry));
  } catch (const std::exception& e) {
    throw ApiError(500, fmt::format("the model '{}' failed to load: {}", entry->id, e.what()),
                   "model");
  }
}

ModelRef acquire_model(ServerState& s, const nlohmann::ordered_json& body) {
  std::optional<std::string> name;
  if (body.is_object()) {
    const auto it = body.find("model");
    if (it != body.end() && !it->is_null()) {
      if (!it->is_string()) throw ApiError(400, "model must be a string", "model");
      name = it->get<std::string>();
    }
  }
  return acquire_model(s, name);
}

std::vector<ListedModel> list_models(const ServerState& s) {
  std::vector<ListedModel> out;
  if (!s.pool) {
    if (s.model) out.push_back({s.model->model_id, s.model->engine->n_ctx(), true});
    return out;
  }
  std::map<std::string, int64_t> loaded;
  s.pool->for_each_loaded([&](const ServedModel& m) { loaded[m.model_id] = m.engine->n_ctx(); });
  for (const ModelEntry& e : s.pool->entries()) {
    const auto it = loaded.find(e.id);
    out.push_back({e.id, it != loaded.end() ? it->second : e.context, it != loaded.end()});
  }
  return out;
}

void for_each_loaded_model(const ServerState& s,
                           const std::function<void(const ServedModel&)>& fn) {
  if (s.pool)
    s.pool->for_each_loaded(fn);
  else if (s.model)
    fn(*s.model);
}

std::string model_id_for(const std::string& model_dir) {
  // A snapshot of the Hugging Face cache is named by its repo, not by its commit hash.
  if (auto repo_id = hub::repo_id_for_snapshot_dir(model_dir)) return *repo_id;
  std::string id = std::filesystem::path(model_dir).lexically_normal().filename().string();
  if (id.empty()) id = std::filesystem::path(model_dir).parent_path().filename().string();
  return id.empty() ? "hearth" : id;
}

int default_http_threads(int64_t max_running, const std::string& device) {
  const int64_t running = max_running > 0 ? max_running : default_max_running(device == "cpu");
  return int(std::clamp<int64_t>(running + 32, 64, 4096));
}

}  // namespace hearth::server
