// Connection life cycle, all of it on the connection's strand:
//   wait for bytes (idle deadline) → read the head (head deadline) → [100 Continue] → read the
//   body (body deadline) → hand the request to a worker (or run it here for RunOn::IoThread) →
//   write the response (each write has a deadline) → next request, or close.
// The socket is never read while a request is being handled, so pipelined requests wait in the
// buffer and are answered in order, and the socket's descriptor stays open for the handler's
// hang-up probe until the response is done. A worker writes a streamed body by posting each
// write to the strand and waiting for it: back-pressure, and one thread touches the socket.
// Beast's string_view as std::string_view (this is the only file that includes Beast).
#define BOOST_BEAST_USE_STD_STRING_VIEW
#include "server/http/http_server.h"

#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "server/http/worker_pool.h"
#include "server/thread_latency.h"

namespace hearth::server::http {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using boost::system::error_code;

namespace {

// Longer targets are refused (414) before routing: patterns are std::regex, whose matcher
// recurses per character.
constexpr size_t kMaxTargetBytes = 8192;
// How long a closing connection keeps reading what the client still sends.
constexpr std::chrono::seconds kLinger{5};
// Bodies at least this large are followed by malloc_trim once handled.
constexpr size_t kTrimAfterBodyBytes = size_t{1} << 20;
// Writes in flight when the server stops get this long before their socket is cancelled.
constexpr std::chrono::seconds kStopWriteTimeout{2};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string reason_phrase(int status) {
  const auto r = bhttp::obsolete_reason(bhttp::int_to_status(unsigned(status)));
  return r.empty() ? "Status" : std::string(r);
}

// Thousands of connections need as many descriptors; the soft limit is often 1,024.
void raise_descriptor_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// glibc raises its mmap threshold to the largest block freed so far (up to 32 MB) and its trim
// threshold to twice that, and never trims the top of a thread's arena below it: after one
// 30 MB prompt each worker's arena kept ~60 MB resident for good. Fixed thresholds keep large
// blocks in mmap (returned when freed) and let freed arena tops go back to the system.
void bound_malloc_retention() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

}  // namespace

class Connection;

struct HttpServer::Impl : std::enable_shared_from_this<HttpServer::Impl> {
  HttpOptions opt;
  Router router;
  ErrorResponder on_error;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::unique_ptr<WorkerPool> workers;
  std::thread io_thread;
  std::atomic<bool> stopping{false};
  int bound_port = 0;

  std::mutex conns_mu;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> conns;

  void accept();
  void add_cors(const Request& req, Response& res) const;
  bool origin_allowed(const std::string& origin) const {
    return !opt.cors_origin.empty() && !origin.empty() &&
           (opt.cors_origin == "*" || opt.cors_origin == origin);
  }
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<HttpServer::Impl> srv, tcp::socket socket)
      : srv_(std::move(srv)), socket_(std::move(socket)), timer_(socket_.get_executor()) {
    error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);  // SSE deltas are small: no Nagle batching
    const auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string();
  }

  void start() {
    net::dispatch(socket_.get_executor(),
                  [self = shared_from_this()] { self->wait_for_request(); });
  }

  // On stop: an idle connection closes now; a busy one closes when its response is done.
  void close_if_idle() {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      if (!self->busy_) self->close();
    });
  }

 private:
  // --- timers: one per connection, used by one phase at a time; stale expiries are ignored ---
  void arm(std::chrono::milliseconds after) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (ec || gen != self->timer_gen_) return;
      self->timed_out_ = true;
      error_code ignored;
      self->socket_.cancel(ignored);  // the pending operation completes with operation_aborted
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void wait_for_request() {
    if (srv_->stopping) return close();
    if (buffer_.size() > 0) return read_head();  // a pipelined request is already here
    arm(srv_->opt.idle_timeout);
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
      self->disarm();
      if (ec || self->srv_->stopping) return self->close();
      self->read_head();
    });
  }

  void read_head() {
    parser_.emplace();
    parser_->header_limit(uint32_t(srv_->opt.max_header_bytes));
    parser_->body_limit(srv_->opt.max_body_bytes);
    arm(srv_->opt.header_timeout);
    bhttp::async_read_header(socket_, buffer_, *parser_,
                             [self = shared_from_this()](error_code ec, size_t) {
                               self->disarm();
                               self->on_head(ec);
                             });
  }

  void on_head(error_code ec) {
    if (ec) return on_read_error(ec);
    busy_ = true;
    const auto& head = parser_->get();
    if (lower(head[bhttp::field::expect]) == "100-continue" && !parser_->is_done()) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      arm(srv_->opt.write_timeout);
      net::async_write(socket_, net::buffer(kContinue),
                       [self = shared_from_this()](error_code wec, size_t) {
                         self->disarm();
                         if (wec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    arm(srv_->opt.body_timeout);
    bhttp::async_read(socket_, buffer_, *parser_,
                      [self = shared_from_this()](error_code ec, size_t) {
                        self->disarm();
                        if (ec) return self->on_read_error(ec);
                        self->on_request();
                      });
  }

  void on_read_error(error_code ec) {
    busy_ = true;
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
        ec == net::error::eof || timed_out_ ||
        ec.category() != bhttp::make_error_code(bhttp::error::end_of_stream).category())
      return close();  // hang-up, deadline or socket error: nobody to answer
    // The framing itself is bad: answer once, then close (the rest of the stream is unreadable).
    int status = 400;
    std::string msg = "malformed HTTP request: " + ec.message();
    if (ec == bhttp::error::body_limit) {
      status = 413;
      msg = fmt::format("the request body is over the {} byte limit", srv_->opt.max_body_bytes);
    } else if (ec == bhttp::error::header_limit) {
      status = 431;
      msg = fmt::format("the request head is over the {} byte limit", srv_->opt.max_header_bytes);
    }
    Request req;
    if (parser_ && parser_->is_header_done()) req.path = std::string(parser_->get().target());
    Response res;
    srv_->on_error(req, res, status, msg);
    write_whole(serialize(req, res, /*keep_alive=*/false), /*keep_alive=*/false);
  }

  void on_request() {
    auto msg = parser_->release();
    parser_.reset();
    auto req = std::make_shared<Request>();
    req->method = std::string(msg.method_string());
    req->target = std::string(msg.target());
    req->path = req->target.substr(0, req->target.find('?'));
    for (const auto& f : msg) req->headers.emplace_back(lower(f.name_string()), f.value());
    req->body = std::move(msg.body());
    req->remote_addr = remote_;
    const int fd = socket_.native_handle();
    req->client_gone_probe = [fd] {
      pollfd p{fd, POLLIN | POLLRDHUP, 0};
      if (::poll(&p, 1, 0) <= 0) return false;
      if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
      char c;  // pipelined bytes are not a hang-up; end of stream is
      return (p.revents & POLLIN) && ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    };
    const bool keep_alive = msg.keep_alive();
    http10_ = msg.version() < 11;

    Response res;
    if (req->target.size() > kMaxTargetBytes) {
      srv_->on_error(*req, res, 414,
                     fmt::format("the request target is over {} bytes", kMaxTargetBytes));
      return respond_here(*req, res, false);
    }
    if (req->method == "OPTIONS") {  // CORS preflight (or a plain capability query)
      res.status = 204;
      const std::string allow = srv_->router.methods_for(req->path);
      res.set_header("Allow", allow.empty() ? "OPTIONS" : allow + ", OPTIONS");
      return respond_here(*req, res, keep_alive);
    }
    const Router::Match m = srv_->router.find(*req);
    if (!m.handler) {
      if (m.path_known) {
        srv_->on_error(*req, res, 405, "method not allowed: " + req->method + " " + req->path);
        res.set_header("Allow", srv_->router.methods_for(req->path));
      } else {
        srv_->on_error(*req, res, 404, "not found: " + req->method + " " + req->path);
      }
      return respond_here(*req, res, keep_alive);
    }
    if (m.run_on == RunOn::IoThread) {
      run_handler(*m.handler, *req, res);
      return respond_here(*req, res, keep_alive);
    }
    srv_->workers->enqueue(
        [self = shared_from_this(), req, handler = m.handler, keep_alive]() mutable {
          const bool large = req->body.size() >= kTrimAfterBodyBytes;
          {
            Response wres;
            self->run_handler(*handler, *req, wres);
            self->respond_from_worker(*req, wres, keep_alive);
          }
          req.reset();
          // A large body leaves its JSON tree and token vectors as free chunks in this thread's
          // malloc arena, which glibc keeps; hand them back so RSS returns to its idle level.
          if (large) malloc_trim(0);
        });
  }

  void run_handler(const Handler& handler, const Request& req, Response& res) {
    try {
      handler(req, res);
    } catch (const std::exception& e) {  // handlers catch their own; this is the last guard
      res = Response{};
      srv_->on_error(req, res, 500, std::string("internal error: ") + e.what());
    } catch (...) {
      res = Response{};
      srv_->on_error(req, res, 500, "internal error");
    }
  }

  // The head, and the body unless it is streamed.
  std::string serialize(const Request& req, Response& res, bool keep_alive) {
    srv_->add_cors(req, res);
    const bool head = req.method == "HEAD";
    if (head) res.stream = nullptr;  // no body at all; GET routes do not stream anyway
    const bool streamed = bool(res.stream);
    if (streamed && http10_) keep_alive = false;  // HTTP/1.0 has no chunks: the close ends it
    std::string out = fmt::format("HTTP/1.1 {} {}\r\n", res.status, reason_phrase(res.status));
    if (!res.content_type.empty()) out += "Content-Type: " + res.content_type + "\r\n";
    if (!streamed)
      out += fmt::format("Content-Length: {}\r\n", res.body.size());
    else if (!http10_)
      out += "Transfer-Encoding: chunked\r\n";
    out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    for (const auto& [k, v] : res.headers) out += k + ": " + v + "\r\n";
    out += "\r\n";
    if (!streamed && !head) out += res.body;
    return out;
  }

  // Called on the strand (routes run on the I/O thread, and errors found before routing).
  void respond_here(const Request& req, Response& res, bool keep_alive) {
    if (res.stream) {  // a streamed body needs a thread that may block: move it to a worker
      srv_->workers->enqueue([self = shared_from_this(), req = std::make_shared<Request>(req),
                              res = std::make_shared<Response>(std::move(res)),
                              keep_alive] { self->respond_from_worker(*req, *res, keep_alive); });
      return;
    }
    keep_alive = keep_alive && !srv_->stopping;
    write_whole(serialize(req, res, keep_alive), keep_alive);
  }

  void respond_from_worker(const Request& req, Response& res, bool keep_alive) {
    keep_alive = keep_alive && !srv_->stopping;
    if (!res.stream) {
      std::string bytes = serialize(req, res, keep_alive);
      net::post(socket_.get_executor(),
                [self = shared_from_this(), bytes = std::move(bytes), keep_alive]() mutable {
                  self->write_whole(std::move(bytes), keep_alive);
                });
      return;
    }
    if (http10_) keep_alive = false;
    bool ok = write_and_wait(serialize(req, res, keep_alive));
    struct ChunkWriter final : BodyWriter {
      Connection& c;
      bool& ok;
      ChunkWriter(Connection& conn, bool& good) : c(conn), ok(good) {}
      bool write(std::string_view bytes) override {
        if (!ok || bytes.empty()) return ok;
        if (c.http10_) return ok = c.write_and_wait(std::string(bytes));
        std::string chunk = fmt::format("{:x}\r\n", bytes.size());
        chunk.append(bytes);
        chunk += "\r\n";
        return ok = c.write_and_wait(std::move(chunk));
      }
    } writer(*this, ok);
    try {
      res.stream(writer);
    } catch (const std::exception& e) {  // the head is out: all that is left is to cut it short
      log(LogLevel::Warn, "a streamed response failed: {}", e.what());
      ok = false;
    }
    if (ok && !http10_) ok = write_and_wait("0\r\n\r\n");
    net::post(socket_.get_executor(),
              [self = shared_from_this(), keep = keep_alive && ok] { self->finish(keep); });
  }

  // From a worker: one write on the strand, waited for. False when the client is gone or the
  // write ran past its deadline.
  bool write_and_wait(std::string bytes) {
    std::promise<bool> done;
    std::future<bool> result = done.get_future();
    net::post(socket_.get_executor(), [self = shared_from_this(), &bytes, &done] {
      self->arm(self->write_deadline());
      net::async_write(self->socket_, net::buffer(bytes), [self, &done](error_code ec, size_t) {
        self->disarm();
        done.set_value(!ec);
      });
    });
    return result.get();
  }

  void write_whole(std::string bytes, bool keep_alive) {
    auto buf = std::make_shared<std::string>(std::move(bytes));
    arm(write_deadline());
    net::async_write(socket_, net::buffer(*buf),
                     [self = shared_from_this(), buf, keep_alive](error_code ec, size_t) {
                       self->disarm();
                       self->finish(keep_alive && !ec);
                     });
  }

  std::chrono::milliseconds write_deadline() const {
    return srv_->stopping
               ? std::min<std::chrono::milliseconds>(srv_->opt.write_timeout, kStopWriteTimeout)
               : srv_->opt.write_timeout;
  }

  void finish(bool keep_alive) {
    busy_ = false;
    timed_out_ = false;
    if (keep_alive && !srv_->stopping) return wait_for_request();
    linger_then_close();
  }

  // After the last response: stop sending, then read and drop what the client still sends
  // until it closes (or kLinger passes). Closing at once with unread bytes (the body of a
  // request refused with 413) makes the kernel send a reset, and the client loses the response.
  void linger_then_close() {
    busy_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    drain_buf_.resize(16384);
    arm(kLinger);
    drain();
  }
  void drain() {
    socket_.async_read_some(net::buffer(drain_buf_),
                            [self = shared_from_this()](error_code ec, size_t) {
                              if (ec) return self->close();
                              self->drain();
                            });
  }

  void close() {
    if (!socket_.is_open()) return;
    busy_ = true;  // nothing more is read from a closing connection
    disarm();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    socket_.close(ignored);
  }

  friend struct HttpServer::Impl;
  std::shared_ptr<HttpServer::Impl> srv_;
  tcp::socket socket_;
  net::steady_timer timer_;
  uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  bool busy_ = false;  // a request is being read or handled
  bool http10_ = false;
  boost::beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::string remote_;
  std::vector<char> drain_buf_;  // only while lingering

 public:
  ~Connection() {
    std::lock_guard lock(srv_->conns_mu);
    srv_->conns.erase(this);
  }
};

void HttpServer::Impl::add_cors(const Request& req, Response& res) const {
  const std::string origin = req.header("origin");
  if (!origin_allowed(origin)) return;
  res.set_header("Access-Control-Allow-Origin", opt.cors_origin == "*" ? "*" : origin);
  if (opt.cors_origin != "*") res.set_header("Vary", "Origin");
  if (req.method == "OPTIONS") {
    res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    const std::string asked = req.header("access-control-request-headers");
    res.set_header(
        "Access-Control-Allow-Headers",
        asked.empty() ? "Authorization, Content-Type, x-api-key, anthropic-version" : asked);
    res.set_header("Access-Control-Max-Age", "86400");
  }
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(
      net::make_strand(ioc), [self = shared_from_this()](error_code ec, tcp::socket socket) {
        if (self->stopping || !self->acceptor.is_open()) return;
        if (ec) {
          // Out of descriptors (EMFILE) and the like: pause instead of spinning on the error.
          log(LogLevel::Warn, "accept failed: {}; retrying in 100 ms", ec.message());
          self->accept_retry.expires_after(std::chrono::milliseconds(100));
          self->accept_retry.async_wait([self](error_code) { self->accept(); });
          return;
        }
        std::shared_ptr<Connection> conn;
        {
          std::lock_guard lock(self->conns_mu);
          if (self->conns.size() < self->opt.max_connections) {
            conn = std::make_shared<Connection>(self, std::move(socket));
            self->conns.emplace(conn.get(), conn);
          }
        }
        if (conn) conn->start();  // else the socket closes as it goes out of scope
        self->accept();
      });
}

HttpServer::HttpServer(HttpOptions options, Router router, ErrorResponder on_error)
    : impl_(std::make_shared<Impl>()) {
  impl_->opt = std::move(options);
  impl_->router = std::move(router);
  impl_->on_error = std::move(on_error);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::start() {
  Impl& s = *impl_;
  raise_descriptor_limit();
  bound_malloc_retention();
  error_code ec;
  const auto address =
      net::ip::make_address(s.opt.host == "localhost" ? "127.0.0.1" : s.opt.host, ec);
  if (ec) fail("cannot listen on {}: not an IP address ({})", s.opt.host, ec.message());
  const tcp::endpoint ep(address, uint16_t(s.opt.port));
  s.acceptor.open(ep.protocol(), ec);
  // SO_REUSEADDR lets a restarted server bind past connections in TIME_WAIT; unlike
  // SO_REUSEPORT it does not let a second live server share the port.
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (ec)
    fail("cannot listen on {}:{}: {}", s.opt.host, s.opt.port,
         ec == net::error::address_in_use ? "the port is in use (is another server running?)"
                                          : ec.message());
  s.acceptor.listen(s.opt.backlog, ec);
  if (ec) fail("cannot listen on {}:{}: {}", s.opt.host, s.opt.port, ec.message());
  s.bound_port = s.acceptor.local_endpoint().port();
  s.workers = std::make_unique<WorkerPool>(size_t(std::max(1, s.opt.worker_threads)));
  s.work.emplace(s.ioc.get_executor());
  s.accept();
  s.io_thread = std::thread([&s] {
    prefer_short_slices_for_this_thread();  // it writes every token's bytes
    s.ioc.run();
  });
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (!s.io_thread.joinable() || s.stopping.exchange(true)) return;
  net::post(s.ioc, [&s] {
    error_code ignored;
    s.acceptor.close(ignored);
    s.accept_retry.cancel();
  });
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard lock(s.conns_mu);
    for (auto& [ptr, weak] : s.conns)
      if (auto c = weak.lock()) live.push_back(std::move(c));
  }
  for (auto& c : live) c->close_if_idle();
  live.clear();
  s.workers->shutdown();  // handlers in flight finish; their writes are still served by I/O
  s.work.reset();         // the I/O thread returns once every connection has closed
  s.io_thread.join();
}

}  // namespace hearth::server::http
