// The HTTP/1.1 server under hearth's routes: event-driven I/O (Boost.Asio, Beast's parser) on one
// thread, handlers on a worker pool. An idle keep-alive connection or a client sending its
// request slowly costs a socket and a few KB, never a thread, so neither starves the handlers;
// each phase has a deadline (waiting for the next request, the head, the body, each write).
// Pipelined requests are read one at a time and answered in order. Malformed framing gets a 400
// (413 for a body over the limit, 431 for a head over it) and the connection is closed.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "server/http/router.h"

namespace hearth::server::http {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_body_bytes = size_t{32} << 20;
  size_t max_header_bytes = size_t{64} << 10;
  int backlog = 4096;       // the kernel caps it at net.core.somaxconn
  int worker_threads = 64;  // requests handled at once; more wait in arrival order
  size_t max_connections = 16384;
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(30)};    // between requests
  std::chrono::milliseconds header_timeout{std::chrono::seconds(30)};  // the whole head
  std::chrono::milliseconds body_timeout{std::chrono::seconds(120)};   // the whole body
  std::chrono::milliseconds write_timeout{std::chrono::seconds(30)};   // each write
  // CORS: "" answers no cross-origin request, "*" any origin, else this exact origin.
  std::string cors_origin;
};

// Fills `res` with an error in the API's shape (the server knows OpenAI vs Anthropic bodies).
using ErrorResponder =
    std::function<void(const Request& req, Response& res, int status, const std::string& message)>;

class HttpServer {
 public:
  HttpServer(HttpOptions options, Router router, ErrorResponder on_error);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port exclusively and starts serving; throws hearth::Error naming the address when
  // it is in use or not local.
  void start();
  int port() const;
  // Stops accepting, closes idle connections, lets handlers in flight finish (their writes get a
  // short deadline), then joins every thread.
  void stop();

  struct Impl;  // defined in http_server.cpp (connections hold it too)

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace hearth::server::http
