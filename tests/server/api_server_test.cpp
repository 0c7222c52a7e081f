// The public server (include/hearth/server.h) over a public Runtime on the bundled default model:
// it serves the Runtime's model with the options given, and stopping it ends its own requests
// (a stream gets an error event) while the Runtime and the requests submitted to it run on.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "hearth/server.h"

namespace {

const std::string kModel = std::string(HEARTH_SOURCE_DIR) + "/models/default";

// One request on its own connection (Connection: close), read as raw bytes.
class Client {
 public:
  Client(int port, const std::string& request) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    if (connected_)
      connected_ = send(fd_, request.data(), request.size(), 0) == ssize_t(request.size());
  }
  ~Client() { close(fd_); }
  bool connected() const { return connected_; }
  // Reads until `marker` has arrived (true) or the server closed the connection (false).
  bool read_until(const std::string& marker) {
    while (received_.find(marker) == std::string::npos)
      if (!read_some()) return false;
    return true;
  }
  // Reads to the end and hangs up, as a client does (a server lingers until then).
  const std::string& read_all() {
    while (read_some()) {
    }
    shutdown(fd_, SHUT_RDWR);
    return received_;
  }

 private:
  bool read_some() {
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    received_.append(buf, size_t(n));
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

std::string get(const std::string& path, const std::string& headers = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" + headers + "\r\n";
}

std::string post(const std::string& path, const std::string& body) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/json\r\n"
         "Content-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

class ApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override { runtime_ = hearth::Runtime::load({.model = kModel, .threads = 2}); }
  std::unique_ptr<hearth::Runtime> runtime_;
};

TEST_F(ApiServerTest, ServesTheRuntimesModelWithItsOptions) {
  hearth::ApiServer server(*runtime_, {.port = 0, .api_key = "test-key"});
  server.start();
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(server.url(), "http://127.0.0.1:" + std::to_string(server.port()));
  {
    Client c(server.port(), get("/health"));
    const std::string& r = c.read_all();
    EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_NE(r.find(R"("status":"ok")"), std::string::npos) << r;
  }
  {
    Client c(server.port(), get("/v1/models"));
    EXPECT_EQ(c.read_all().rfind("HTTP/1.1 401", 0), 0u) << "no key, yet served";
  }
  {
    Client c(server.port(), get("/v1/models", "Authorization: Bearer test-key\r\n"));
    const std::string& r = c.read_all();
    EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
    EXPECT_NE(r.find(R"("id":"default")"), std::string::npos) << r;  // the directory's name
  }
  // The port is the server's alone, and a server starts once.
  hearth::ApiServer second(*runtime_, {.port = server.port()});
  EXPECT_THROW(second.start(), hearth::Error);
  EXPECT_THROW(server.start(), hearth::Error);
}

TEST_F(ApiServerTest, StopEndsItsRequestsButNotTheRuntime) {
  hearth::CompletionRequest direct;
  direct.prompt = "Once upon a time";
  direct.max_tokens = 64;
  direct.temperature = 0.0f;
  hearth::Generation beside = runtime_->submit(direct);

  hearth::ApiServer server(*runtime_, {.port = 0, .model_id = "served"});
  server.start();
  const std::string body =
      R"({"model":"served","stream":true,"max_tokens":1500,"messages":[{"role":"user","content":"Tell me a long story."}]})";
  Client stream(server.port(), post("/v1/chat/completions", body));
  ASSERT_TRUE(stream.connected());
  ASSERT_TRUE(stream.read_until("data: {")) << "no streamed chunk before the stop";
  // The client reads on while the server stops, as a real one does (the server waits for it to
  // close the connection after the last byte).
  std::string streamed;
  std::thread reader([&] { streamed = stream.read_all(); });
  const auto t0 = std::chrono::steady_clock::now();
  server.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  reader.join();
  EXPECT_NE(streamed.find(R"("error")"), std::string::npos) << streamed;
  EXPECT_NE(streamed.find("data: [DONE]"), std::string::npos) << streamed;
  // Nothing is served any more.
  Client refused(server.port(), get("/health"));
  EXPECT_FALSE(refused.connected() && refused.read_all().find("200") != std::string::npos);

  // The Runtime's own requests were not touched, and it takes new ones.
  EXPECT_EQ(beside.wait().finish_reason, "length");
  direct.max_tokens = 4;
  EXPECT_EQ(runtime_->complete(direct).finish_reason, "length");
}

TEST_F(ApiServerTest, BadOptionsAreErrorsNamingThem) {
  auto message = [&](const hearth::ApiServerOptions& o) {
    try {
      hearth::ApiServer server(*runtime_, o);
    } catch (const hearth::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message({.port = 70000}).find("ApiServerOptions::port"), std::string::npos);
  EXPECT_NE(message({.http_threads = -1}).find("http_threads"), std::string::npos);
  EXPECT_NE(message({.idle_timeout_s = 0}).find("idle_timeout_s"), std::string::npos);
  EXPECT_NE(message({.max_prompt_tokens = -1}).find("max_prompt_tokens"), std::string::npos);
  hearth::ApiServer not_local(*runtime_, {.host = "not-an-address", .port = 0});
  EXPECT_THROW(not_local.start(), hearth::Error);
}

}  // namespace
