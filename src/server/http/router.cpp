#include "server/http/router.h"

#include <algorithm>
#include <cctype>

namespace hearth::server::http {

std::string Request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k.size() == name.size() && std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        }))
      return v;
  return {};
}

namespace {

int query_hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string query_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && query_hex_digit(s[i + 1]) >= 0 &&
               query_hex_digit(s[i + 2]) >= 0) {
      out += char(query_hex_digit(s[i + 1]) * 16 + query_hex_digit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> Request::query_params() const {
  std::vector<std::pair<std::string, std::string>> params;
  const size_t q = target.find('?');
  if (q == std::string::npos) return params;
  std::string_view rest(target);
  rest.remove_prefix(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;  // "a=1&&b=2"
    const size_t eq = pair.find('=');
    params.emplace_back(query_decode(pair.substr(0, eq)),
                        eq == std::string_view::npos ? "" : query_decode(pair.substr(eq + 1)));
  }
  return params;
}

void Response::set_header(std::string name, std::string value) {
  headers.emplace_back(std::move(name), std::move(value));
}

void Response::set_content(std::string content, std::string type) {
  body = std::move(content);
  content_type = std::move(type);
}

void Response::set_stream(std::string type, std::function<void(BodyWriter&)> producer) {
  content_type = std::move(type);
  stream = std::move(producer);
}

void Router::add(std::string method, const std::string& pattern, Handler handler, RunOn run_on) {
  routes_.push_back({std::move(method), std::regex(pattern), std::move(handler), run_on});
}

void Router::get(const std::string& pattern, Handler handler, RunOn run_on) {
  add("GET", pattern, std::move(handler), run_on);
}

void Router::post(const std::string& pattern, Handler handler, RunOn run_on) {
  add("POST", pattern, std::move(handler), run_on);
}

void Router::del(const std::string& pattern, Handler handler, RunOn run_on) {
  add("DELETE", pattern, std::move(handler), run_on);
}

Router::Match Router::find(Request& req) const {
  Match m;
  std::smatch sm;
  for (const Route& r : routes_) {
    if (!std::regex_match(req.path, sm, r.pattern)) continue;
    // HEAD is GET without the body (RFC 9110 9.3.2): the GET handler runs, the writer sends only
    // its head. Ollama's CLI checks the server with HEAD /.
    const bool head_of_get = req.method == "HEAD" && r.method == "GET";
    if (r.method != req.method && !head_of_get) {
      m.path_known = true;
      continue;
    }
    req.matches.assign(sm.begin(), sm.end());
    m.handler = &r.handler;
    m.run_on = r.run_on;
    return m;
  }
  return m;
}

std::string Router::methods_for(const std::string& path) const {
  std::string out;
  for (const Route& r : routes_) {
    if (!std::regex_match(path, r.pattern) || out.find(r.method) != std::string::npos) continue;
    out += out.empty() ? r.method : ", " + r.method;
    if (r.method == "GET") out += ", HEAD";
  }
  return out;
}

}  // namespace hearth::server::http
