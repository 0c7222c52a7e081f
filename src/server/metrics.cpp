#include "server/metrics.h"

#include <fmt/format.h>

namespace hearth::server {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cum);
  }
  cum += counts_.back();
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cum, name, sum_,
                     name, count_);
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 1}),
      e2e_({0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::count_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, status}];
}
void Metrics::observe_ttft(double s) {
  std::lock_guard lock(mu_);
  ttft_.observe(s);
}
void Metrics::observe_itl(double s) {
  std::lock_guard lock(mu_);
  itl_.observe(s);
}
void Metrics::observe_e2e(double s) {
  std::lock_guard lock(mu_);
  e2e_.observe(s);
}
void Metrics::add_tokens(int64_t prompt, int64_t generated, int64_t cached) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += uint64_t(prompt);
  generated_tokens_ += uint64_t(generated);
  cached_tokens_ += uint64_t(cached);
}

std::string Metrics::render(const EngineStats& engine, const PromptCacheStats& cache) const {
  std::lock_guard lock(mu_);
  std::string out;
  out +=
      "# HELP hearth_requests_total HTTP requests by endpoint and status.\n# TYPE "
      "hearth_requests_total counter\n";
  for (const auto& [key, n] : requests_)
    out += fmt::format("hearth_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", key.first,
                       key.second, n);
  out += fmt::format(
      "# HELP hearth_prompt_tokens_total Prompt tokens of finished requests.\n# TYPE "
      "hearth_prompt_tokens_total counter\n"
      "hearth_prompt_tokens_total {}\n"
      "# HELP hearth_generation_tokens_total Generated tokens.\n# TYPE "
      "hearth_generation_tokens_total counter\n"
      "hearth_generation_tokens_total {}\n"
      "# HELP hearth_prompt_cached_tokens_total Prompt tokens reused from the prompt cache.\n"
      "# TYPE hearth_prompt_cached_tokens_total counter\nhearth_prompt_cached_tokens_total {}\n"
      "# HELP hearth_prompt_cache_lookups_total Prompt cache lookups.\n# TYPE "
      "hearth_prompt_cache_lookups_total counter\n"
      "hearth_prompt_cache_lookups_total {}\n"
      "# HELP hearth_prompt_cache_hits_total Lookups that reused at least one token.\n"
      "# TYPE hearth_prompt_cache_hits_total counter\nhearth_prompt_cache_hits_total {}\n"
      "# HELP hearth_prompt_cache_bytes Bytes held by the prompt cache.\n# TYPE "
      "hearth_prompt_cache_bytes gauge\n"
      "hearth_prompt_cache_bytes {}\n"
      "# HELP hearth_prompt_cache_entries Sequences held by the prompt cache.\n# TYPE "
      "hearth_prompt_cache_entries gauge\n"
      "hearth_prompt_cache_entries {}\n"
      "# HELP hearth_requests_waiting Requests queued for the engine (preempted ones included).\n"
      "# TYPE hearth_requests_waiting gauge\n"
      "hearth_requests_waiting {}\n"
      "# HELP hearth_requests_running Requests in the engine's batch.\n# TYPE "
      "hearth_requests_running gauge\n"
      "hearth_requests_running {}\n"
      "# HELP hearth_preemptions_total Requests preempted for KV memory (recomputed later).\n"
      "# TYPE hearth_preemptions_total counter\nhearth_preemptions_total {}\n"
      "# HELP hearth_kv_cache_bytes Bytes held by the running requests' KV caches and "
      "recurrent states.\n# TYPE hearth_kv_cache_bytes gauge\nhearth_kv_cache_bytes {}\n",
      prompt_tokens_, generated_tokens_, cached_tokens_, cache.lookups, cache.hits, cache.bytes,
      cache.entries, engine.waiting, engine.running, engine.preemptions, engine.kv_bytes);
  if (engine.kv_budget != SIZE_MAX)
    out += fmt::format(
        "# HELP hearth_kv_cache_budget_bytes The KV budget (--kv-budget).\n# TYPE "
        "hearth_kv_cache_budget_bytes gauge\nhearth_kv_cache_budget_bytes {}\n",
        engine.kv_budget);
  ttft_.render(out, "hearth_time_to_first_token_seconds", "Request arrival to first token.");
  itl_.render(out, "hearth_inter_token_latency_seconds", "Time between generated tokens.");
  e2e_.render(out, "hearth_request_duration_seconds", "Request arrival to last token.");
  return out;
}

}  // namespace hearth::server
