// The HTTP request and response as route handlers see them, independent of the I/O library
// underneath (http_server.cpp). A handler fills a Response; a streamed body is a producer that
// runs after the head is sent and writes through a BodyWriter, which blocks until the client has
// taken the bytes (back-pressure), so a producer never buffers more than one batch of events.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hearth::server::http {

class BodyWriter {
 public:
  virtual ~BodyWriter() = default;
  // False once the client is gone or a write timed out; later writes do nothing.
  virtual bool write(std::string_view bytes) = 0;
};

struct Request {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // without the query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::vector<std::string> matches;  // the route pattern's captures; [0] is the whole path
  std::string remote_addr;
  // Whether the client has closed its end (polls the socket without reading from it).
  std::function<bool()> client_gone_probe;

  // The value of a header (name case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
  // The query's parameters (the target after '?'), names and values percent-decoded and '+' read
  // as a space, in order; a repeated name appears once per occurrence. A '%' not followed by two
  // hex digits is kept as it is.
  std::vector<std::pair<std::string, std::string>> query_params() const;
  bool client_gone() const { return client_gone_probe && client_gone_probe(); }
};

struct Response {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::function<void(BodyWriter&)> stream;  // set: the body is streamed (chunked)

  void set_header(std::string name, std::string value);
  void set_content(std::string body, std::string type);
  void set_stream(std::string type, std::function<void(BodyWriter&)> producer);
};

}  // namespace hearth::server::http
