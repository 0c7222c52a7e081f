#include "hub/net/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <mutex>

#include "core/error.h"

namespace hearth::hub {

namespace {

constexpr int kMaxRedirects = 10;
// API answers kept in memory are small (a tree page of a large repo is a few hundred KB); a body
// past this is not an API answer.
constexpr size_t kMaxKeptBody = size_t{64} << 20;
// Error bodies only feed messages.
constexpr size_t kMaxErrorBody = size_t{64} << 10;

struct Transfer {
  const HttpRequest* request = nullptr;
  CURL* curl = nullptr;
  HttpResponse response;
  bool following = false;  // a 3xx body is dropped when the redirect will be followed
  bool streaming = false;  // on_body has been given the head
  std::exception_ptr error;
};

std::string trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  s.erase(s.find_last_not_of(ws) + 1);
  return s;
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string line(data, size * n);
  if (line.rfind("HTTP/", 0) == 0) {
    t->response.headers.clear();  // a new answer (after a 100 Continue, say)
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    t->response.headers[trim(name)] = trim(line.substr(colon + 1));
  }
  return size * n;
}

bool is_success(long status) { return status == 200 || status == 206; }

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  if (t->following && status >= 300 && status < 400) return bytes;
  try {
    if (t->request->on_body && is_success(status)) {
      if (!t->streaming) {
        t->streaming = true;
        t->response.status = status;
        if (!t->request->on_body(t->response, nullptr, 0)) return 0;
      }
      return t->request->on_body(t->response, data, bytes) ? bytes : 0;
    }
    const size_t cap = is_success(status) ? kMaxKeptBody : kMaxErrorBody;
    if (t->response.body.size() + bytes > cap) {
      if (!is_success(status)) return bytes;  // the start of an error page is enough
      throw Error(fmt::format("the answer from {} is larger than {} bytes", t->request->url, cap));
    }
    t->response.body.append(data, bytes);
    return bytes;
  } catch (...) {
    t->error = std::current_exception();
    return 0;
  }
}

bool is_transient(CURLcode code) {
  switch (code) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3:
      return true;
    default:
      return false;
  }
}

}  // namespace

void http_global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string url_origin(const std::string& url) {
  CURLU* u = curl_url();
  std::string origin;
  if (curl_url_set(u, CURLUPART_URL, url.c_str(), 0) == CURLUE_OK) {
    char *scheme = nullptr, *host = nullptr, *port = nullptr;
    if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
      std::string h = host;
      std::transform(h.begin(), h.end(), h.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      origin = std::string(scheme) + "://" + h + ":" + port;
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
  }
  curl_url_cleanup(u);
  return origin;
}

HttpClient::HttpClient() {
  http_global_init();
  curl_ = curl_easy_init();
  if (!curl_) fail("cannot start libcurl (curl_easy_init failed)");
}

HttpClient::~HttpClient() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse HttpClient::perform(const HttpRequest& request) {
  CURL* curl = static_cast<CURL*>(curl_);
  const std::string token_origin = url_origin(request.url);
  std::string url = request.url;
  for (int hop = 0;; ++hop) {
    Transfer t;
    t.request = &request;
    t.curl = curl;
    t.following = request.follow_redirects;
    char errbuf[CURL_ERROR_SIZE] = {0};

    curl_easy_reset(curl);  // keeps the connection cache
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "hearth/" HEARTH_VERSION);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 30L);
    // A transfer slower than 1 KB/s for a minute has stalled: it ends and is retried.
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    if (request.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    std::string range;
    if (request.range_start) {
      range = std::to_string(*request.range_start) + "-";
      curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
    }
    curl_slist* headers = nullptr;
    // The token is for the Hub: a redirect to another origin (the CDN) goes without it.
    if (!request.bearer_token.empty() && url_origin(url) == token_origin)
      headers =
          curl_slist_append(headers, ("Authorization: Bearer " + request.bearer_token).c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

    const CURLcode code = curl_easy_perform(curl);
    curl_slist_free_all(headers);
    if (t.error) std::rethrow_exception(t.error);
    if (code != CURLE_OK) {
      const std::string detail = errbuf[0] ? errbuf : curl_easy_strerror(code);
      const bool no_connection = code == CURLE_COULDNT_CONNECT ||
                                 code == CURLE_COULDNT_RESOLVE_HOST ||
                                 code == CURLE_COULDNT_RESOLVE_PROXY;
      throw TransportError(fmt::format("{}: {}", url, detail), is_transient(code), no_connection);
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &t.response.status);
    t.response.url = url;
    char* next = nullptr;
    curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &next);
    const bool redirect = t.response.status >= 300 && t.response.status < 400 && next;
    if (redirect) t.response.redirect_url = next;
    if (request.follow_redirects && redirect) {
      if (hop + 1 >= kMaxRedirects)
        throw TransportError(fmt::format("{}: more than {} redirects", request.url, kMaxRedirects),
                             false);
      url = next;
      continue;
    }
    // An empty 200 body reaches no write callback: the stream still gets its head.
    if (request.on_body && is_success(t.response.status) && !t.streaming &&
        request.method != "HEAD") {
      if (!request.on_body(t.response, nullptr, 0))
        throw TransportError(fmt::format("{}: download aborted", url), false);
    }
    return std::move(t.response);
  }
}

}  // namespace hearth::hub
