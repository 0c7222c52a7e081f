// HTTP over libcurl for the Hub client: one easy handle per thread (connections are reused),
// redirects followed by hand so that the Authorization header goes only to the origin it was
// meant for (the Hub sends large files to a CDN on another host), response bodies either kept
// (small API answers) or streamed to a callback (file downloads). libcurl honours http_proxy,
// https_proxy and no_proxy.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

namespace hearth::hub {

// A request that got no HTTP answer (refused, reset, timed out, cut short, DNS): `transient`
// says whether trying again may help.
class TransportError : public std::runtime_error {
 public:
  TransportError(const std::string& message, bool transient, bool no_connection = false)
      : std::runtime_error(message), transient(transient), no_connection(no_connection) {}
  bool transient;
  bool no_connection;  // no connection was made (refused, DNS): few retries are worth it
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // lowercase names; the last value of each
  std::string body;                            // kept unless streamed (error bodies: the start)
  std::string url;                             // the URL that answered (after redirects)
  std::string redirect_url;                    // a 3xx's Location, resolved against url
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  std::string url;
  std::string bearer_token;             // sent to the request URL's origin only
  std::optional<uint64_t> range_start;  // "Range: bytes=N-"
  bool follow_redirects = true;         // false: a 3xx is the answer
  // Streams the body of a 200/206 answer instead of keeping it; called first with the answer's
  // status and headers (data null, size 0), then per chunk. Returning false aborts the transfer.
  std::function<bool(const HttpResponse& head, const char* data, size_t size)> on_body;
};

class HttpClient {
 public:
  HttpClient();
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Performs the request (and its redirects, up to 10). Any HTTP status is an answer; throws
  // TransportError when there is none, and rethrows what on_body threw.
  HttpResponse perform(const HttpRequest& request);

 private:
  void* curl_;  // CURL*
};

// Calls curl_global_init once; every HttpClient does, so callers need not.
void http_global_init();
// "scheme://host:port" of an absolute URL ("" when it does not parse).
std::string url_origin(const std::string& url);

}  // namespace hearth::hub
