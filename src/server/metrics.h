// Prometheus metrics for /metrics: request counts by endpoint and status, token counters,
// time-to-first-token and inter-token-latency histograms, queue depth and prompt-cache hits.
// Thread-safe; observations are cheap (one mutex, a few adds) next to a decode step.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kv/prompt_cache.h"
#include "runtime/engine.h"

namespace hearth::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Appends the _bucket/_sum/_count lines of `name`.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_request(const std::string& endpoint, int status);
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_e2e(double seconds);
  void add_tokens(int64_t prompt, int64_t generated, int64_t cached);
  std::string render(const EngineStats& engine, const PromptCacheStats& cache) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram ttft_, itl_, e2e_;
  uint64_t prompt_tokens_ = 0, generated_tokens_ = 0, cached_tokens_ = 0;
};

}  // namespace hearth::server
