// `hearth serve`: the OpenAI- and Anthropic-compatible HTTP server. The port is bound before the
// model loads (so /health can answer 503 "loading"); the "ready at URL" line is printed once the
// model is loaded. SIGINT/SIGTERM are taken by sigwait() on the main thread (blocked in every
// other thread), so shutdown runs as ordinary code: refuse new requests, end in-flight ones,
// join the HTTP threads, exit 0.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "cli/serve_models.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "runtime/engine.h"
#include "server/server.h"

namespace hearth::cli {

namespace {

struct ServeOptions {
  ModelOptions model;
  std::vector<std::string> models;  // -m, repeatable
  std::string models_dir;
  bool hf_cache = false;
  int64_t max_loaded = 1;
  int64_t models_ram_mb = 0;
  server::ServerOptions server;
  int64_t cache_mb = 8192;
  int64_t responses_mb = 256;
  int http_threads = 0;  // 0: the running cap + 32, at least 64
  std::string api_key_file;
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The key from --api-key, --api-key-file or HEARTH_API_KEY (in that order). A file or the
// environment keeps it out of `ps` and shell history.
void resolve_api_key(ServeOptions& o) {
  if (!o.server.api_key.empty() && !o.api_key_file.empty())
    fail("give the key with --api-key or --api-key-file, not both");
  if (!o.api_key_file.empty()) {
    std::ifstream in(o.api_key_file);
    if (!in) fail("--api-key-file: cannot read {}", o.api_key_file);
    std::getline(in, o.server.api_key);
    while (!o.server.api_key.empty() &&
           std::isspace(static_cast<unsigned char>(o.server.api_key.back())))
      o.server.api_key.pop_back();
    if (o.server.api_key.empty())
      fail("--api-key-file: {} holds no key on its first line", o.api_key_file);
  } else if (o.server.api_key.empty()) {
    if (const char* env = std::getenv("HEARTH_API_KEY")) o.server.api_key = env;
  }
}

int run_serve(ServeOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (o.model.threads < 0) fail("--threads must be >= 1, got {}", o.model.threads);
  if (o.cache_mb < 0) fail("--cache-ram must be >= 0 MB, got {}", o.cache_mb);
  if (o.server.port < 0 || o.server.port > 65535)
    fail("--port must be in [0, 65535], got {}", o.server.port);
  if (o.server.n_ctx < 0) fail("--ctx must be >= 0, got {}", o.server.n_ctx);
  if (o.http_threads < 0 || o.http_threads > 4096)
    fail("--http-threads must be in [1, 4096] (0: the default), got {}", o.http_threads);
  if (o.server.request_timeout_s < 0)
    fail("--request-timeout must be >= 0 seconds, got {}", o.server.request_timeout_s);
  if (o.server.idle_timeout_s < 1)
    fail("--idle-timeout must be >= 1 second, got {}", o.server.idle_timeout_s);
  if (o.server.max_prompt_tokens < 0)
    fail("--max-prompt-tokens must be >= 0, got {}", o.server.max_prompt_tokens);
  if (!o.server.web_dir.empty() && !std::filesystem::is_directory(o.server.web_dir))
    fail("--web-dir: {} is not a directory", o.server.web_dir);
  if (o.responses_mb < 0 || o.responses_mb > (int64_t{1} << 30))
    fail("--responses-ram must be in [0, 2^30] MB, got {}", o.responses_mb);
  if (o.max_loaded < 1) fail("--max-loaded must be >= 1, got {}", o.max_loaded);
  if (o.models_ram_mb < 0) fail("--models-ram must be >= 0 MB, got {}", o.models_ram_mb);
  resolve_api_key(o);
  ThreadPool::set_global_threads(o.model.threads);
  const bool several = o.models.size() > 1 || !o.models_dir.empty() || o.hf_cache;
  std::vector<server::ModelEntry> entries;
  if (several)
    entries = list_served_models(o.models, o.models_dir, o.hf_cache);
  else
    o.server.model_dir = resolve_model_dir(o.models.empty() ? std::string() : o.models[0]);
  o.server.device = o.model.device;
  o.server.mmap = !o.model.no_mmap;
  o.server.deterministic = o.model.deterministic;
  o.server.tensor_parallel = o.model.tensor_parallel;
  o.server.cache_mb = size_t(o.cache_mb);
  o.server.responses_bytes = size_t(o.responses_mb) << 20;
  o.server.http_threads = o.http_threads > 0
                              ? o.http_threads
                              : server::default_http_threads(o.server.max_running, o.model.device);

  // Block the stop signals before any thread starts, so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);  // "model loaded", from the loader thread
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server

  ProgressLine load_line("loading weights", "GB", 1e9);  // on a terminal, for slow loads
  o.server.load_progress = [&load_line](size_t done, size_t total) {
    load_line.update(int64_t(done), int64_t(total));
  };
  server::Server srv(o.server);
  srv.start();
  if (!is_loopback(o.server.host) && o.server.api_key.empty())
    std::fprintf(stderr,
                 "hearth serve: warning: listening on %s without an API key: anyone who can reach "
                 "this port can use the model (set --api-key-file or HEARTH_API_KEY)\n",
                 o.server.host.c_str());
  const bool wildcard = o.server.host == "0.0.0.0" || o.server.host == "::";
  const std::string where = wildcard ? " (and on every interface)" : "";
  if (several) {
    // Nothing loads now: each model loads when a request first names it.
    std::string ids;
    for (size_t i = 0; i < entries.size(); ++i) ids += (i ? ", " : "") + entries[i].id;
    const size_t n = entries.size();
    srv.set_models(std::move(entries), size_t(o.max_loaded), uint64_t(o.models_ram_mb) << 20);
    std::printf(
        "hearth serve: ready at %s%s (%zu models: %s; each loads when first named, %lld "
        "at most at once)\n",
        srv.url().c_str(), where.c_str(), n, ids.c_str(), (long long)o.max_loaded);
    std::fflush(stdout);
    int sig = 0;
    do sigwait(&stop_signals, &sig);
    while (sig == SIGUSR1);
    std::fprintf(stderr, "hearth serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv.stop();
    return 0;
  }
  std::fprintf(stderr, "hearth serve: listening on %s:%d, loading %s\n", o.server.host.c_str(),
               srv.port(), o.server.model_dir.c_str());
  const auto t_load = std::chrono::steady_clock::now();
  // Load on a helper thread so a signal during a long load still stops the process promptly.
  std::exception_ptr load_error;
  std::atomic<bool> loaded{false};
  std::thread loader([&] {
    try {
      srv.load();
    } catch (...) {
      load_error = std::current_exception();
    }
    loaded = true;
    union sigval v {};
    sigqueue(getpid(), SIGUSR1, v);  // wake the main thread
  });
  const sigset_t wait_set = stop_signals;
  int sig = 0;
  for (;;) {
    sigwait(&wait_set, &sig);
    if (sig != SIGUSR1) break;
    if (!loaded) continue;
    loader.join();
    if (load_error) {
      srv.stop();
      std::rethrow_exception(load_error);
    }
    load_line.erase(true);
    using ms = std::chrono::duration<double, std::milli>;
    const auto now = std::chrono::steady_clock::now();
    const server::ServedModel& model = *srv.state().model;
    const auto& info = model.engine->info();
    std::printf(
        "hearth serve: ready at %s%s (model %s, %s, ctx %lld; load %.0f ms, start %.0f ms)\n",
        srv.url().c_str(), where.c_str(), model.model_id.c_str(), info.model_type.c_str(),
        (long long)model.engine->n_ctx(), ms(now - t_load).count(), ms(t_load - t0).count());
    std::fflush(stdout);
  }
  std::fprintf(stderr, "hearth serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  srv.stop();
  if (loader.joinable()) loader.detach();  // still loading: the process exits under it
  if (!loaded) std::_Exit(0);
  return 0;
}

CommandRegistration serve_command(
    "serve", "serve OpenAI- and Anthropic-compatible HTTP APIs and a chat page", [](CLI::App& sub) {
      auto o = std::make_shared<ServeOptions>();
      add_model_options(sub, o->model, &o->models);
      sub.add_option(
          "--models-dir", o->models_dir,
          "serve every checkpoint directory in DIR, each loaded when a request names it");
      sub.add_flag("--hf-cache", o->hf_cache,
                   "serve every model of the Hugging Face cache (`hearth pull`), loaded on demand");
      sub.add_option("--max-loaded", o->max_loaded,
                     "with several models: how many stay loaded at once (the least recently used "
                     "is unloaded first)")
          ->capture_default_str();
      sub.add_option("--models-ram", o->models_ram_mb,
                     "with several models: MB of checkpoints loaded at once (0: no cap)")
          ->capture_default_str();
      sub.add_option("--host", o->server.host, "address to listen on")->capture_default_str();
      sub.add_option("--port", o->server.port, "port (0: any free port)")->capture_default_str();
      sub.add_option("-c,--ctx", o->server.n_ctx,
                     "context length per request (default: the model's)");
      sub.add_option("--api-key", o->server.api_key,
                     "require this key (Authorization: Bearer KEY, or x-api-key); "
                     "HEARTH_API_KEY sets it too");
      sub.add_option("--api-key-file", o->api_key_file,
                     "read the key from the first line of this file (kept out of `ps`)");
      sub.add_option("--cors-origin", o->server.cors_origin,
                     "let browser pages from this origin call the API (* for any; default: none)");
      sub.add_option("--request-timeout", o->server.request_timeout_s,
                     "end a generation that runs longer than this many seconds (0: no limit)")
          ->capture_default_str();
      sub.add_option("--idle-timeout", o->server.idle_timeout_s,
                     "close a kept-alive connection idle this many seconds")
          ->capture_default_str();
      sub.add_option("--max-prompt-tokens", o->server.max_prompt_tokens,
                     "refuse prompts longer than this (0: the context length)")
          ->capture_default_str();
      sub.add_option("--parallel", o->server.max_running,
                     "requests decoding together, one step for all (0: 16 on the CPU, 256 on a "
                     "GPU); more wait in the queue")
          ->capture_default_str();
      sub.add_option("--max-batch-tokens", o->server.max_batch_tokens,
                     "tokens in a step while requests decode, prompt chunks included: bounds how "
                     "long a new prompt holds up the others' next token (0: 128 on the CPU, the "
                     "prefill chunk on a GPU)")
          ->capture_default_str();
      sub.add_option("--kv-budget", o->server.kv_budget_mb,
                     "MB the running requests' KV caches and recurrent states and the prompt cache "
                     "may hold together (0: half the free RAM on the CPU, 90 % of the free GPU "
                     "memory); the prompt cache gives way first, then the latest request is "
                     "preempted and recomputed later; the context is clamped to what one request "
                     "can hold")
          ->capture_default_str();
      sub.add_option("--cache-ram", o->cache_mb,
                     "prompt cache size in MB, at most the KV budget, of which it is part (0: off)")
          ->capture_default_str();
      sub.add_option("--responses-max", o->server.responses_max,
                     "/v1/responses kept for GET and previous_response_id, at most (0: none; "
                     "least recently used out first)")
          ->capture_default_str();
      sub.add_option("--responses-ram", o->responses_mb, "MB of stored /v1/responses, at most")
          ->capture_default_str();
      sub.add_option("--web-dir", o->server.web_dir,
                     "serve the chat page's files from this directory (to work on the page "
                     "without rebuilding; default: the copy built into hearth)");
      sub.add_flag("!--no-chat-page", o->server.chat_page, "serve no chat page at /");
      sub.add_option("--max-body", o->server.max_body_bytes, "largest request body in bytes")
          ->capture_default_str();
      sub.add_option("--http-threads", o->http_threads,
                     "requests handled at once (idle connections need none; default: "
                     "--parallel + 32, at least 64)");
      return [o] { return run_serve(*o); };
    });

}  // namespace
}  // namespace hearth::cli
