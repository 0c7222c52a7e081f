// ModelPool: on-demand loads (one per model however many requests ask), least-recently-used
// unloading under a count or byte cap that waits for running requests, and failed loads.
#include "server/model_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace hearth::server {
namespace {

using namespace std::chrono_literals;

// A "model" that records its life in a log shared with the test.
struct Log {
  std::mutex mu;
  std::vector<std::string> events;
  void add(std::string e) {
    std::lock_guard lock(mu);
    events.push_back(std::move(e));
  }
  std::vector<std::string> get() {
    std::lock_guard lock(mu);
    return events;
  }
};

struct FakeModel {
  FakeModel(std::string id, Log& log) : id(std::move(id)), log(log) { log.add("load " + this->id); }
  ~FakeModel() { log.add("unload " + id); }
  std::string id;
  Log& log;
};

using Pool = ModelPool<FakeModel>;

std::vector<ModelEntry> entries(std::vector<uint64_t> bytes = {1, 1, 1}) {
  std::vector<ModelEntry> out;
  for (size_t i = 0; i < bytes.size(); ++i)
    out.push_back({std::string(1, char('a' + i)), "/models/" + std::to_string(i), bytes[i]});
  return out;
}

Pool::Loader loader(Log& log, std::atomic<int>* calls = nullptr,
                    std::chrono::milliseconds delay = 0ms) {
  return [&log, calls, delay](const ModelEntry& e) {
    if (calls) ++*calls;
    std::this_thread::sleep_for(delay);
    return std::make_shared<FakeModel>(e.id, log);
  };
}

TEST(ModelPool, FindsByIdWithOrWithoutTheLatestTag) {
  Log log;
  Pool pool(entries(), 1, 0, loader(log));
  ASSERT_NE(pool.find("b"), nullptr);
  EXPECT_EQ(pool.find("b:latest"), pool.find("b"));
  EXPECT_EQ(pool.find("d"), nullptr);
  EXPECT_EQ(pool.find("b:7b"), nullptr);
  EXPECT_TRUE(log.get().empty()) << "nothing loads before a request";
}

TEST(ModelPool, ConcurrentRequestsForOneModelShareOneLoad) {
  Log log;
  std::atomic<int> calls{0};
  Pool pool(entries(), 1, 0, loader(log, &calls, 50ms));
  std::vector<FakeModel*> got(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i)
    threads.emplace_back([&, i] { got[i] = &*pool.acquire(*pool.find("a")); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 1);
  for (FakeModel* m : got) EXPECT_EQ(m, got[0]);
}

TEST(ModelPool, UnloadsTheLeastRecentlyUsedIdleModel) {
  Log log;
  Pool pool(entries(), 2, 0, loader(log));
  { auto a = pool.acquire(*pool.find("a")); }
  { auto b = pool.acquire(*pool.find("b")); }
  { auto a = pool.acquire(*pool.find("a")); }  // a is now the more recent
  { auto c = pool.acquire(*pool.find("c")); }
  EXPECT_EQ(log.get(), (std::vector<std::string>{"load a", "load b", "unload b", "load c"}));
  EXPECT_EQ(pool.loaded(), (std::vector<std::string>{"c", "a"}));
}

TEST(ModelPool, AModelWithRunningRequestsIsUnloadedOnlyAfterThem) {
  Log log;
  Pool pool(entries(), 1, 0, loader(log));
  auto a = pool.acquire(*pool.find("a"));
  std::atomic<bool> got_b{false};
  std::thread t([&] {
    auto b = pool.acquire(*pool.find("b"));
    got_b = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(got_b.load()) << "b loaded while a request still ran on a";
  EXPECT_EQ(log.get(), (std::vector<std::string>{"load a"}));
  a = {};  // the request on a ends
  t.join();
  EXPECT_TRUE(got_b.load());
  EXPECT_EQ(log.get(), (std::vector<std::string>{"load a", "unload a", "load b"}));
}

TEST(ModelPool, AByteCapUnloadsUntilTheNextModelFits) {
  Log log;
  Pool pool(entries({60, 60, 30}), 3, 100, loader(log));
  { auto a = pool.acquire(*pool.find("a")); }
  { auto b = pool.acquire(*pool.find("b")); }  // 120 > 100: a goes
  { auto c = pool.acquire(*pool.find("c")); }  // 90 <= 100: b stays
  EXPECT_EQ(log.get(), (std::vector<std::string>{"load a", "unload a", "load b", "load c"}));
}

TEST(ModelPool, AFailedLoadFailsItsWaitersAndIsTriedAgainLater) {
  Log log;
  std::atomic<int> calls{0};
  std::atomic<bool> fail{true};
  Pool pool(entries(), 1, 0, [&](const ModelEntry& e) -> std::shared_ptr<FakeModel> {
    ++calls;
    std::this_thread::sleep_for(300ms);  // long enough for every thread to be waiting
    if (fail) throw std::runtime_error("no such file: " + e.dir);
    return std::make_shared<FakeModel>(e.id, log);
  });
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      try {
        pool.acquire(*pool.find("a"));
      } catch (const std::runtime_error&) {
        ++errors;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 4);
  EXPECT_EQ(calls.load(), 1) << "the waiters shared the failed load";
  fail = false;
  auto a = pool.acquire(*pool.find("a"));
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(a->id, "a");
}

}  // namespace
}  // namespace hearth::server
