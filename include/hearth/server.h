// hearth's HTTP server as a library: the routes `hearth serve` serves (OpenAI- and
// Anthropic-compatible APIs, /health, /metrics, /tokenize, the chat page; docs/server.md) over a
// Runtime the program loaded itself. Link the installed CMake package's hearth::server (it brings
// hearth::hearth) or pkg-config's hearth-server. See examples/serve.cpp.
//
// The Runtime stays the program's: it must outlive the server, other code may submit to it while
// the server runs (the requests share its engine's steps and queue), and stopping the server
// cancels only the server's own requests. Runtime::metrics() sees the server's requests in the
// engine's load (waiting, running, preemptions) but not in its finished-request counters, which
// count Runtime::submit's; the server's /metrics counts its own.
//
// The server's threads (one for I/O, http_threads for handlers) are its own; it installs no
// signal handlers (its writes raise no SIGPIPE). Like `hearth serve`, start() raises the
// process's open-file limit to the hard limit (thousands of connections) and has malloc give
// freed blocks over 1 MB back to the system (large request bodies).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "hearth/error.h"
#include "hearth/hearth.h"

namespace hearth {

// `hearth serve`'s HTTP flags under their own names, with their defaults (docs/server.md). Every
// field has an initializer, so a designated initializer may leave any out (GCC's -Wextra warns
// otherwise).
struct ApiServerOptions {
  std::string host = "127.0.0.1";  // "0.0.0.0" or "::": every interface
  int port = 8080;                 // 0: any free port (port() says which)
  // What /v1/models lists; "": the model directory's name (ORG/NAME for a snapshot of the
  // Hugging Face cache).
  std::string model_id{};
  // Every /v1/*, /tokenize and /detokenize request must carry it (Authorization: Bearer KEY, or
  // x-api-key: KEY), else 401; "": no key. /, /health and /metrics stay open.
  std::string api_key{};
  std::string cors_origin{};  // browser pages from this origin may call the API; "*": any; "": none
  // Requests handled at once (more wait, in order); a streamed request holds one while it
  // generates. 0: RuntimeOptions::parallel (or its default) + 32, at least 64.
  int http_threads = 0;
  int64_t request_timeout_s = 0;  // a generation running longer ends with 504; 0: no limit
  int64_t idle_timeout_s = 30;    // a kept-alive connection with no request is closed
  uint64_t max_body_bytes = uint64_t{32} << 20;  // larger bodies get 413
  int64_t max_prompt_tokens = 0;                 // longer prompts get 400; 0: the context
  bool chat_page = true;                         // serve the chat page at GET /
  // Read the chat page's files from this directory at start (to work on the page without
  // rebuilding); "": the copy compiled into the library.
  std::string web_dir{};
  // Stored /v1/responses (GET, previous_response_id): at most this many, and this many bytes of
  // their JSON; the least recently used go first. 0 responses: none is kept.
  uint64_t responses_max = 1000;
  uint64_t responses_bytes = uint64_t{256} << 20;
};

class ApiServer {
 public:
  // Checks the options (throws hearth::Error naming a bad one); binds nothing yet.
  ApiServer(Runtime& runtime, ApiServerOptions options = {});
  ~ApiServer();  // stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Binds host:port exclusively and serves from then on (/health says "ok" at once: the model
  // is loaded). Throws hearth::Error naming the address when it is in use or not local. Once.
  void start();
  int port() const;         // the bound port once started (the one asked for before)
  std::string url() const;  // e.g. "http://127.0.0.1:8080" (loopback for a wildcard host)
  // Refuses new requests (503), ends the server's in-flight ones (a stream gets an error event, a
  // plain request a 503), and joins the server's threads. The Runtime and requests submitted to
  // it directly run on. Idempotent; a stopped server does not start again.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth
