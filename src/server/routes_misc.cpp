// Service routes: GET /health (200 when the model is ready, 503 while loading or stopping),
// GET /metrics (Prometheus text), POST /tokenize and /detokenize (vLLM and llama.cpp field names
// both accepted and returned), and the chat page: GET / and its files, compiled in or read from
// --web-dir at start-up (no build step for the page itself; see docs/server.md).
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "server/chat_pipeline.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "server/web_assets.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

namespace {

using nlohmann::json;

using WebFiles =
    std::map<std::string, std::pair<std::string, std::string>>;  // name → (type, bytes)

// The chat page: the copy compiled in, or the files of `dir` when one is given (a directory that
// is not there was refused at start).
WebFiles load_web_files(const ServerOptions& o) {
  WebFiles files;
  if (!o.chat_page) return files;
  static const std::map<std::string, std::string> types = {
      {".html", "text/html; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".svg", "image/svg+xml"},
      {".ico", "image/x-icon"}};
  auto type_of = [](const std::filesystem::path& name) {
    auto it = types.find(name.extension().string());
    return it == types.end() ? std::string() : it->second;
  };
  if (o.web_dir.empty()) {
    for (const WebAsset& a : web_assets()) {
      const std::string type = type_of(a.name);
      if (!type.empty())
        files[a.name] = {type, std::string(reinterpret_cast<const char*>(a.data), a.size)};
    }
    return files;
  }
  for (const auto& e : std::filesystem::directory_iterator(o.web_dir)) {
    const std::string type = type_of(e.path().filename());
    if (!e.is_regular_file() || type.empty()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    files[e.path().filename().string()] = {type, ss.str()};
  }
  return files;
}

std::vector<int32_t> token_list(const ojson& body, const char* key, int64_t n_vocab) {
  const ojson* v = field(body, key);
  if (!v || !v->is_array()) bad_request(std::string(key) + " must be an array of token ids", key);
  std::vector<int32_t> ids;
  for (const auto& t : *v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      bad_request(std::string(key) + ": token ids must be non-negative integers", key);
    if (t.get<int64_t>() >= n_vocab)
      bad_request(fmt::format("{}: token id {} is out of range: the vocabulary has {} ids", key,
                              t.get<int64_t>(), n_vocab),
                  key);
    ids.push_back(int32_t(t.get<int64_t>()));
  }
  return ids;
}

}  // namespace

void register_misc_routes(http::Router& http, ServerState& s) {
  http.get(
      "/health",
      [&s](const http::Request&, http::Response& res) {
        if (s.ready && !s.stopping) {
          send_json(res, {{"status", "ok"}});
        } else {
          json body = {{"status", s.stopping             ? "stopping"
                                  : s.load_error.empty() ? "loading"
                                                         : "error"}};
          if (!s.load_error.empty()) body["error"] = s.load_error;
          send_json(res, body, 503);
        }
      },
      http::RunOn::IoThread);
  http.get(
      "/metrics",
      [&s](const http::Request&, http::Response& res) {
        // Several models: their engines' figures added together.
        EngineStats stats;
        PromptCacheStats cache;
        bool budget = false;
        for_each_loaded_model(s, [&](const ServedModel& m) {
          const EngineStats e = m.engine->stats();
          stats.waiting += e.waiting;
          stats.running += e.running;
          stats.preemptions += e.preemptions;
          stats.kv_bytes += e.kv_bytes;
          if (e.kv_budget != SIZE_MAX) {
            stats.kv_budget = (budget ? stats.kv_budget : 0) + e.kv_budget;
            budget = true;
          }
          const PromptCacheStats c = m.engine->cache_stats();
          cache.lookups += c.lookups;
          cache.hits += c.hits;
          cache.reused_tokens += c.reused_tokens;
          cache.bytes += c.bytes;
          cache.entries += c.entries;
        });
        res.set_content(s.metrics.render(stats, cache), "text/plain; version=0.0.4");
      },
      http::RunOn::IoThread);
  http.post("/tokenize",
            json_post(s, ApiStyle::OpenAI, "/tokenize",
                      [&s](const ojson& body, const http::Request&, http::Response& res) {
                        const ModelRef m = acquire_model(s, body);
                        const Tokenizer* tok = m->engine->tokenizer();
                        if (!tok) bad_request("this model has no tokenizer");
                        std::vector<int32_t> ids;
                        if (field(body, "messages")) {
                          ChatRequest r = parse_openai_chat(body);
                          ids = prepare_chat(s, *m, r, /*for_generation=*/false).gen.prompt;
                        } else {
                          auto text = get_string(body, "content");
                          if (!text) text = get_string(body, "prompt");
                          if (!text)
                            bad_request("give the text as content (or prompt), or messages",
                                        "content");
                          const bool add_special =
                              get_bool(body, "add_special")
                                  .value_or(get_bool(body, "add_special_tokens").value_or(true));
                          ids = tok->encode(*text, add_special);
                        }
                        json out = {{"tokens", ids},
                                    {"count", ids.size()},
                                    {"max_model_len", m->engine->n_ctx()}};
                        if (get_bool(body, "with_pieces").value_or(false)) {
                          json pieces = json::array();
                          for (int32_t id : ids) {
                            const int32_t one[1] = {id};
                            pieces.push_back({{"id", id}, {"piece", tok->decode(one, false)}});
                          }
                          out["pieces"] = pieces;
                        }
                        send_json(res, out);
                      }));
  http.post("/detokenize",
            json_post(s, ApiStyle::OpenAI, "/detokenize",
                      [&s](const ojson& body, const http::Request&, http::Response& res) {
                        const ModelRef m = acquire_model(s, body);
                        const Tokenizer* tok = m->engine->tokenizer();
                        if (!tok) bad_request("this model has no tokenizer");
                        const std::vector<int32_t> ids = token_list(
                            body, "tokens",
                            std::max<int64_t>(tok->vocab_size(), m->engine->info().n_vocab));
                        const std::string text =
                            tok->decode(ids, get_bool(body, "skip_special_tokens").value_or(false));
                        send_json(res, {{"prompt", text}, {"content", text}});
                      }));

  auto files = std::make_shared<const WebFiles>(load_web_files(s.options));
  http.get(R"(/([A-Za-z0-9_\-]*\.?[A-Za-z0-9]*))",
           [&s, files](const http::Request& req, http::Response& res) {
             std::string name = req.matches[1];
             if (name.empty()) name = "index.html";
             auto it = files->find(name);
             if (it == files->end()) {
               send_error(res, ApiStyle::OpenAI, 404,
                          files->empty() ? "no chat page: it is turned off (--no-chat-page)"
                                         : "not found: /" + name);
               s.metrics.count_request("/", 404);
               return;
             }
             res.set_header("Cache-Control", "no-cache");
             res.set_content(it->second.second, it->second.first.c_str());
           },
           http::RunOn::IoThread);
}

}  // namespace hearth::server
