#include "server/runner.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace hearth::server {

namespace {
int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}
std::string addr_of(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  else if (a.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr, buf, sizeof buf);
  return buf;
}
}  // namespace

ConnectionWatch::ConnectionWatch(const httplib::Request& req, int local_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    sockaddr_storage peer{}, local{};
    socklen_t pl = sizeof peer, ll = sizeof local;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (port_of(peer) == req.remote_port && port_of(local) == local_port &&
        addr_of(peer) == req.remote_addr) {
      fd_ = fd;
      break;
    }
  }
  closedir(dir);
}

bool ConnectionWatch::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
  if (p.revents & POLLIN) {  // pipelined bytes are not a hang-up; EOF is
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

struct EngineRequest::Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<GenerationDelta> deltas;
  std::optional<GenerationResult> done;
};

EngineRequest::EngineRequest(ServerState& state, GenerationRequest request,
                             Clock::time_point arrival, bool want_deltas)
    : channel_(std::make_shared<Channel>()), cancel_(std::make_shared<std::atomic<bool>>(false)) {
  request.cancel = cancel_;
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
  state.engine->submit(std::move(request), std::move(cb));
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

GenerationResult pump(EngineRequest& request, const ConnectionWatch* watch,
                      const std::function<bool(const GenerationDelta&)>& on_delta,
                      const std::function<bool()>& heartbeat,
                      const std::function<bool()>& after_batch) {
  bool gone = false;
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
    if (u.done) return *u.done;
    const auto now = Clock::now();
    // Deltas may arrive without pause (non-streaming requests write nothing until the end), so
    // the socket is checked on a clock, not only when idle.
    if (!gone && watch && now - last_check >= std::chrono::milliseconds(100)) {
      last_check = now;
      if (watch->closed()) {
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

}  // namespace hearth::server
