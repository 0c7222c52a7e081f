// Bridges an engine request (callbacks on the worker thread) to the HTTP handler thread that
// waits for it: a channel of deltas plus the final result; the handler polls the client's socket
// so a client that goes away cancels its generation even while it waits in the queue, and ends a
// request that runs past the server's time limit.
// Invariant: the channel outlives both sides (shared_ptr held by the callbacks and the handler),
// so a handler may return early (disconnect) while the engine still finishes the request.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "runtime/engine.h"
#include "server/http/message.h"
#include "server/state.h"

namespace hearth::server {

class EngineRequest {
 public:
  // Submits at once; `arrival` is when the HTTP request arrived (for TTFT). Without
  // want_deltas (non-streaming handlers, which read the final text) the handler is not woken
  // per token: it sleeps until the end, waking only to watch the connection.
  EngineRequest(ServerState& state, Engine& engine, GenerationRequest request,
                Clock::time_point arrival, bool want_deltas = true);
  ~EngineRequest();
  // Deltas carry text and logprobs only (handlers need no token ids; leaving them out keeps the
  // per-token copy free of heap allocations for short texts).
  struct Update {
    std::vector<GenerationDelta> deltas;
    std::optional<GenerationResult> done;
  };
  // Waits up to `timeout` for deltas or the end. The update stays valid until the next call
  // (its buffers are reused: no allocation per token in steady state).
  const Update& wait(std::chrono::milliseconds timeout);
  void cancel();
  // When the server's request time limit runs out (time_point::max(): no limit).
  Clock::time_point deadline() const { return deadline_; }
  int64_t timeout_seconds() const { return timeout_s_; }
  // The server is stopping and its engine is shared (EngineOwnership::Shared): the request is
  // not ended by an engine shutdown, so its handler cancels it.
  bool cancel_for_stop() const { return stop_cancels_ && stop_cancels_->load(); }

 private:
  struct Channel;
  std::shared_ptr<Channel> channel_;
  std::shared_ptr<std::atomic<bool>> cancel_;
  Update update_;
  Clock::time_point deadline_ = Clock::time_point::max();
  int64_t timeout_s_ = 0;
  const std::atomic<bool>* stop_cancels_ = nullptr;  // the server's `stopping`, shared engines only
};

// A result that did not complete, as the client sees it: its HTTP status and message.
struct ResultFailure {
  int status;
  std::string message;
};
std::optional<ResultFailure> result_failure(const ServerState& state, const GenerationResult& r);

// Runs a request to the end, calling on_delta for each delta (false: the client is gone, cancel)
// and after_batch once the deltas that had arrived by a wake-up are handled (where a streaming
// handler writes them out in one go). Polls the connection while waiting, and cancels the
// request when the server's --request-timeout passes (the result then says so: finish_reason
// "error", with the limit in its message) or when a server over a shared engine stops. Returns
// the result.
GenerationResult pump(EngineRequest& request, const http::Request* client,
                      const std::function<bool(const GenerationDelta&)>& on_delta,
                      const std::function<bool()>& heartbeat = {},
                      const std::function<bool()>& after_batch = {});

}  // namespace hearth::server
