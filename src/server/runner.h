// Bridges an engine request (callbacks on the worker thread) to the HTTP handler thread that
// waits for it: a channel of deltas plus the final result, and a watch on the client's socket so
// a client that goes away cancels its generation even while it waits in the queue.
// Invariant: the channel outlives both sides (shared_ptr held by the callbacks and the handler),
// so a handler may return early (disconnect) while the engine still finishes the request.
#pragma once
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "runtime/engine.h"
#include "server/state.h"

namespace hearth::server {

// The socket of the connection a request came in on (cpp-httplib 0.11 does not expose it: it is
// found once by its peer address), polled for a hang-up without reading from it.
class ConnectionWatch {
 public:
  ConnectionWatch(const httplib::Request& req, int local_port);
  bool closed() const;

 private:
  int fd_ = -1;
};

class EngineRequest {
 public:
  // Submits at once; `arrival` is when the HTTP request arrived (for TTFT).
  EngineRequest(ServerState& state, GenerationRequest request, Clock::time_point arrival);
  ~EngineRequest();
  struct Update {
    std::vector<GenerationDelta> deltas;
    std::optional<GenerationResult> done;
  };
  // Waits up to `timeout` for deltas or the end.
  Update wait(std::chrono::milliseconds timeout);
  void cancel();

 private:
  struct Channel;
  std::shared_ptr<Channel> channel_;
  std::shared_ptr<std::atomic<bool>> cancel_;
};

// Runs a request to the end, calling on_delta for each delta (false: the client is gone, cancel).
// Polls the connection while waiting. Returns the final result.
GenerationResult pump(EngineRequest& request, const ConnectionWatch* watch,
                      const std::function<bool(const GenerationDelta&)>& on_delta,
                      const std::function<bool()>& heartbeat = {});

}  // namespace hearth::server
