// Routes: (method, path pattern) → handler. Patterns are regular expressions matched against the
// whole path; their captures reach the handler as Request::matches. A route says where it runs:
// on a worker thread (the default: handlers that may block, such as generation) or on the I/O
// thread itself (GETs that only read memory: /health must answer while every worker is busy).
#pragma once
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "server/http/message.h"

namespace hearth::server::http {

using Handler = std::function<void(const Request&, Response&)>;

enum class RunOn { Worker, IoThread };

class Router {
 public:
  void get(const std::string& pattern, Handler handler, RunOn run_on = RunOn::Worker);
  void post(const std::string& pattern, Handler handler, RunOn run_on = RunOn::Worker);
  void del(const std::string& pattern, Handler handler, RunOn run_on = RunOn::Worker);

  struct Match {
    const Handler* handler = nullptr;  // null: no route for this method and path
    RunOn run_on = RunOn::Worker;
    bool path_known = false;  // another method has this path (405, not 404)
  };
  // Fills req.matches when a route matches.
  Match find(Request& req) const;
  // The methods that have a route for `path` (for Allow and CORS preflights).
  std::string methods_for(const std::string& path) const;

 private:
  struct Route {
    std::string method;
    std::regex pattern;
    Handler handler;
    RunOn run_on;
  };
  void add(std::string method, const std::string& pattern, Handler handler, RunOn run_on);
  std::vector<Route> routes_;
};

}  // namespace hearth::server::http
