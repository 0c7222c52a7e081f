// The engine's worker: the scheduling loop. Each iteration admits queued requests, drops the
// cancelled ones, and runs one step: a decode token for every running request past its prompt,
// then prompt chunks, oldest request first, up to the step's token budget. The requests turn the
// step's logits into tokens and text (running_request.cpp). A step that throws fails the
// requests in it with finish_reason "error"; the others go on.
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>

#include "core/error.h"
#include "core/log.h"
#include "runtime/generate.h"
#include "runtime/running_request.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// ---- StopStringFilter ----------------------------------------------------------------------

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStringFilter::push(const std::string& text) {
  if (matched_ >= 0) return {};
  pending_ += text;
  // Earliest match wins (a stop string never leaks, even if another one ends earlier).
  size_t best = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = pending_.find(stops_[i]);
    if (pos != std::string::npos && pos < best) best = pos, matched_ = int(i);
  }
  if (best != std::string::npos) {
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  out.swap(pending_);
  return matched_ >= 0 ? std::string() : out;
}

const std::string& StopStringFilter::matched_stop() const {
  static const std::string none;
  return matched_ >= 0 ? stops_[size_t(matched_)] : none;
}

// ---- Engine ----------------------------------------------------------------------------------

std::unique_ptr<Engine> Engine::load(const EngineOptions& options) {
  LoadOptions load;
  load.device = options.device;
  load.mmap = options.mmap;
  auto model = load_model(options.model_dir, load);
  ModelConfig config = ModelConfig::load(options.model_dir);
  std::shared_ptr<const Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(options.model_dir) / "tokenizer.json"))
    tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(options.model_dir));
  return std::make_unique<Engine>(std::move(model), std::move(tokenizer), std::move(config),
                                  options);
}

Engine::Engine(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer,
               ModelConfig config, EngineOptions options)
    : model_(std::move(model)),
      tokenizer_(std::move(tokenizer)),
      config_(std::move(config)),
      options_(std::move(options)),
      default_sampling_(sampling_defaults(config_)),
      cache_(options_.cache_bytes) {
  n_ctx_ = options_.n_ctx > 0 ? options_.n_ctx : model_->info().n_ctx_train;
  if (n_ctx_ <= 0) n_ctx_ = 4096;
  // The model's own context passed these bounds at load (config_checks.h); a longer one the user
  // asks for is clamped: positions are int32, and the KV cache's size must fit in 64 bits.
  const int64_t kv_bytes = std::max<int64_t>(model_->info().kv_bytes_per_token, 1);
  const int64_t max_ctx = std::min<int64_t>(INT32_MAX, INT64_MAX / kv_bytes);
  if (n_ctx_ > max_ctx) {
    log(LogLevel::Warn,
        "context length {} (--ctx) is more than this model can address (positions are int32; "
        "its KV cache takes {} bytes a position); clamped to {}",
        n_ctx_, kv_bytes, max_ctx);
    n_ctx_ = max_ctx;
  }
  if (options_.max_running < 0) fail("--parallel must be >= 0, got {}", options_.max_running);
  if (options_.max_step_tokens < 0)
    fail("--max-batch-tokens must be >= 0, got {}", options_.max_step_tokens);
  const bool cpu = options_.device == "cpu";
  max_running_ = options_.max_running > 0 ? options_.max_running : cpu ? 16 : 256;
  max_step_tokens_ = options_.max_step_tokens > 0 ? options_.max_step_tokens
                     : cpu                        ? 128
                                                  : model_->default_prefill_chunk();
  // Every running request's decode token fits in a step, with room for a prompt chunk.
  max_step_tokens_ = std::max(max_step_tokens_, max_running_ + 1);
  worker_ = std::thread([this] { worker_loop(); });
}

Engine::~Engine() { shutdown(); }

size_t Engine::queue_depth() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

void Engine::validate(const GenerationRequest& r) const {
  const int64_t n_vocab = model_->info().n_vocab;
  if (r.prompt.empty()) fail("the prompt is empty: at least one token is needed");
  for (int32_t t : r.prompt)
    if (t < 0 || t >= n_vocab) fail("prompt token id {} is out of range [0, {})", t, n_vocab);
  if (r.max_tokens < 0) fail("max_tokens must be >= 0, got {}", r.max_tokens);
  const int64_t n_prompt = int64_t(r.prompt.size());
  if (r.max_tokens > n_ctx_ - n_prompt)  // not a sum: max_tokens near 2^63 would overflow it
    fail(
        "this model's context is {} tokens, but the request has {} prompt tokens + max_tokens {} = "
        "{}",
        n_ctx_, n_prompt, r.max_tokens, double(n_prompt) + double(r.max_tokens));
  if (r.logprobs > 20) fail("top_logprobs must be <= 20, got {}", r.logprobs);
  for (int32_t t : r.stop_token_ids)
    if (t < 0 || t >= n_vocab) fail("stop token id {} is out of range [0, {})", t, n_vocab);
  r.sampling.validate(n_vocab);
}

uint64_t Engine::submit(GenerationRequest request, GenerationCallbacks callbacks) {
  std::unique_lock lock(mu_);
  const uint64_t id = next_id_++;
  if (stopping_) {
    lock.unlock();
    GenerationResult r;
    r.finish_reason = "error";
    r.error = "the server is shutting down";
    if (callbacks.on_done) callbacks.on_done(r);
    return id;
  }
  if (!request.cancel) request.cancel = std::make_shared<std::atomic<bool>>(false);
  queue_.push_back(Job{id, std::move(request), std::move(callbacks), now_ms()});
  lock.unlock();
  cv_.notify_one();
  return id;
}

GenerationResult Engine::generate(GenerationRequest request,
                                  std::function<void(const GenerationDelta&)> on_delta) {
  std::promise<GenerationResult> done;
  auto future = done.get_future();
  GenerationCallbacks cb;
  cb.on_delta = std::move(on_delta);
  cb.on_done = [&done](const GenerationResult& r) { done.set_value(r); };
  submit(std::move(request), std::move(cb));
  return future.get();
}

void Engine::shutdown() {
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    dropped.swap(queue_);
  }
  cv_.notify_all();
  for (auto& job : dropped) {
    GenerationResult r;
    r.finish_reason = "error";
    r.error = "the server is shutting down";
    if (job.callbacks.on_done) job.callbacks.on_done(r);
  }
  if (worker_.joinable()) worker_.join();
}

bool Engine::requests_waiting() const {
  std::lock_guard lock(mu_);
  return !queue_.empty();
}

bool Engine::admit(std::vector<std::unique_ptr<RunningRequest>>& running) {
  std::vector<Job> admitted;
  {
    std::unique_lock lock(mu_);
    if (running.empty()) cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) {  // shutdown() failed the queued ones; the running ones end cancelled
      for (auto& r : running) r->finish("cancelled");
      return !queue_.empty();
    }
    while (!queue_.empty() && int64_t(running.size() + admitted.size()) < max_running_) {
      admitted.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  const RunningRequest::Context context{*model_, tokenizer_.get(),
                                        options_.cache_bytes > 0 ? &cache_ : nullptr, n_ctx_,
                                        options_.checkpoint_interval};
  for (Job& job : admitted) {
    const double now = now_ms();
    GenerationResult failed;
    failed.timings.queue_ms = now - job.submitted_at_ms;
    if (job.request.cancel->load()) {
      failed.finish_reason = "cancelled";
    } else {
      try {
        validate(job.request);
        running.push_back(std::make_unique<RunningRequest>(
            context, std::move(job.request), std::move(job.callbacks), job.submitted_at_ms, now));
        continue;
      } catch (const std::exception& e) {
        failed.finish_reason = "error";
        failed.error = e.what();
      }
    }
    failed.usage.prompt_tokens = int64_t(job.request.prompt.size());
    if (job.callbacks.on_done) job.callbacks.on_done(failed);
  }
  return true;
}

void Engine::worker_loop() {
  std::vector<std::unique_ptr<RunningRequest>> running;
  while (admit(running)) {
    std::erase_if(running, [](const auto& r) { return r->done(); });
    step(running);
    std::erase_if(running, [](const auto& r) { return r->done(); });
  }
}

void Engine::step(std::span<const std::unique_ptr<RunningRequest>> running) {
  for (const auto& r : running)
    if (!r->done() && r->cancel_requested()) r->finish("cancelled");
  std::vector<RunningRequest*> live;
  for (const auto& r : running)
    if (!r->done()) live.push_back(r.get());
  if (live.empty()) return;
  // A lone decoding request on a backend that picks ahead keeps its steps queued one ahead, until
  // another request arrives; then the queued step's token is taken and it steps in batches.
  RunningRequest* solo = live.size() == 1 && !live[0]->prefilling() ? live[0] : nullptr;
  if (solo && solo->can_pick_ahead()) {
    const bool others = requests_waiting();
    try {
      solo->decode_ahead(!others);
      if (others) solo->drain_picks();
    } catch (const std::exception& e) {
      solo->finish("error", e.what());
    }
    return;
  }
  for (RunningRequest* r : live) {
    try {
      r->drain_picks();
    } catch (const std::exception& e) {
      r->finish("error", e.what());
    }
  }

  // Decode tokens first, then prompt chunks, oldest request first, within the token budget.
  std::vector<Model::BatchItem> items;
  std::vector<RunningRequest*> in_step;
  std::vector<int32_t> inputs(live.size());
  for (RunningRequest* r : live) {
    if (r->done() || r->prefilling()) continue;
    const std::optional<int32_t> input = r->decode_input();
    if (!input) continue;  // context full: finished "length"
    inputs[in_step.size()] = *input;
    items.push_back(
        {&r->state(), std::span<const int32_t>(&inputs[in_step.size()], 1), r->logits()});
    in_step.push_back(r);
  }
  const int64_t n_decode = int64_t(items.size());
  const int64_t chunk =
      options_.prefill_chunk > 0 ? options_.prefill_chunk : model_->default_prefill_chunk();
  int64_t budget = (n_decode > 0 ? max_step_tokens_ : chunk) - n_decode;
  for (RunningRequest* r : live) {
    if (budget <= 0) break;
    if (r->done() || !r->prefilling()) continue;
    const std::span<const int32_t> part = r->prompt_chunk(std::min(budget, chunk));
    const bool ends_prompt = int64_t(part.size()) == r->prompt_left();
    items.push_back({&r->state(), part, ends_prompt ? r->logits() : nullptr});
    in_step.push_back(r);
    budget -= int64_t(part.size());
  }
  if (items.empty()) return;
  try {
    model_->forward_batch(items);
  } catch (const std::exception& e) {
    for (RunningRequest* r : in_step) r->finish("error", e.what());
    return;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    RunningRequest* r = in_step[i];
    const std::span<float> logits(items[i].logits, items[i].logits ? size_t(info().n_vocab) : 0);
    try {
      if (int64_t(i) < n_decode)
        r->token_ran(logits);
      else
        r->prompt_chunk_ran(int64_t(items[i].tokens.size()), logits);
    } catch (const std::exception& e) {
      r->finish("error", e.what());
    }
  }
}

}  // namespace hearth
