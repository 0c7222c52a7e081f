#include "server/runner.h"

#include <fmt/format.h>

namespace hearth::server {

struct EngineRequest::Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<GenerationDelta> deltas;
  std::optional<GenerationResult> done;
};

EngineRequest::EngineRequest(ServerState& state, Engine& engine, GenerationRequest request,
                             Clock::time_point arrival, bool want_deltas)
    : channel_(std::make_shared<Channel>()), cancel_(std::make_shared<std::atomic<bool>>(false)) {
  request.cancel = cancel_;
  if (state.options.request_timeout_s > 0)
    deadline_ = arrival + std::chrono::seconds(state.options.request_timeout_s);
  timeout_s_ = state.options.request_timeout_s;
  if (state.engine_ownership == EngineOwnership::Shared) stop_cancels_ = &state.stopping;
  GenerationCallbacks cb;
  auto ch = channel_;
  auto last = std::make_shared<std::optional<Clock::time_point>>();
  Metrics* metrics = &state.metrics;
  std::atomic<int>* running = &state.running;
  cb.on_delta = [ch, last, metrics, arrival, running, want_deltas](const GenerationDelta& d) {
    const auto now = Clock::now();
    if (!last->has_value()) {
      running->fetch_add(1);
      metrics->observe_ttft(std::chrono::duration<double>(now - arrival).count());
    } else if (!d.tokens.empty()) {
      const double dt =
          std::chrono::duration<double>(now - **last).count() / double(d.tokens.size());
      for (size_t i = 0; i < d.tokens.size(); ++i) metrics->observe_itl(dt);
    }
    *last = now;
    if (!want_deltas) return;
    std::lock_guard lock(ch->mu);
    GenerationDelta& copy = ch->deltas.emplace_back();
    copy.text = d.text;
    copy.logprobs = d.logprobs;
    ch->cv.notify_one();
  };
  cb.on_done = [ch, last, metrics, arrival, running](const GenerationResult& r) {
    if (last->has_value()) running->fetch_sub(1);
    metrics->add_tokens(r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.cached_tokens);
    if (r.finish_reason != "error")
      metrics->observe_e2e(std::chrono::duration<double>(Clock::now() - arrival).count());
    std::lock_guard lock(ch->mu);
    ch->done = r;
    ch->cv.notify_one();
  };
  engine.submit(std::move(request), std::move(cb));
}

EngineRequest::~EngineRequest() {
  // A handler that leaves early (client gone, exception) must not leave work behind.
  std::lock_guard lock(channel_->mu);
  if (!channel_->done) cancel_->store(true);
}

void EngineRequest::cancel() { cancel_->store(true); }

const EngineRequest::Update& EngineRequest::wait(std::chrono::milliseconds timeout) {
  update_.deltas.clear();
  std::unique_lock lock(channel_->mu);
  channel_->cv.wait_for(lock, timeout, [&] { return !channel_->deltas.empty() || channel_->done; });
  std::swap(update_.deltas, channel_->deltas);  // both vectors keep their capacity
  if (channel_->done && !update_.done) update_.done = channel_->done;
  return update_;
}

GenerationResult pump(EngineRequest& request, const http::Request* client,
                      const std::function<bool(const GenerationDelta&)>& on_delta,
                      const std::function<bool()>& heartbeat,
                      const std::function<bool()>& after_batch) {
  bool gone = false, timed_out = false, stopped = false;
  auto last_beat = Clock::now(), last_check = Clock::now();
  for (;;) {
    const auto& u = request.wait(std::chrono::milliseconds(100));
    for (const auto& d : u.deltas)
      if (!gone && on_delta && !on_delta(d)) {
        gone = true;
        request.cancel();
      }
    if (!gone && after_batch && !u.deltas.empty() && !after_batch()) {
      gone = true;
      request.cancel();
    }
    if (u.done) {
      GenerationResult r = *u.done;
      if (timed_out && r.finish_reason == "cancelled") {
        r.finish_reason = "timeout";
        r.error =
            fmt::format("the request ran past the server's time limit of {} s (--request-timeout)",
                        request.timeout_seconds());
      }
      return r;
    }
    if (!stopped && request.cancel_for_stop()) {
      stopped = true;  // ends "cancelled": a 503, or an error event on a stream
      request.cancel();
    }
    const auto now = Clock::now();
    if (!gone && !timed_out && now >= request.deadline()) {
      timed_out = true;
      request.cancel();
    }
    // Deltas may arrive without pause (non-streaming requests write nothing until the end), so
    // the socket is checked on a clock, not only when idle.
    if (!gone && client && now - last_check >= std::chrono::milliseconds(100)) {
      last_check = now;
      if (client->client_gone()) {
        gone = true;
        request.cancel();
      }
    }
    if (!gone && heartbeat && u.deltas.empty() && now - last_beat > std::chrono::seconds(5)) {
      last_beat = now;
      if (!heartbeat()) {
        gone = true;
        request.cancel();
      }
    }
  }
}

std::optional<ResultFailure> result_failure(const ServerState& state, const GenerationResult& r) {
  if (r.finish_reason == "error") return ResultFailure{state.stopping ? 503 : 500, r.error};
  if (r.finish_reason == "timeout") return ResultFailure{504, r.error};
  if (r.finish_reason == "cancelled")
    return ResultFailure{503, "the request was cancelled (server shutting down)"};
  return std::nullopt;
}

}  // namespace hearth::server
