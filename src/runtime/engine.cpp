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
#include "kv/kv_cache.h"
#include "runtime/generate.h"
#include "runtime/running_request.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

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
  load.deterministic = options.deterministic;
  load.tensor_parallel = options.tensor_parallel;
  load.progress = options.load_progress;
  auto model = load_model(options.model_dir, load);
  ModelConfig config = ModelConfig::load(options.model_dir);
  std::shared_ptr<const Tokenizer> tokenizer;
  if (std::filesystem::exists(std::filesystem::path(options.model_dir) / "tokenizer.json"))
    tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(options.model_dir));
  auto engine =
      std::make_unique<Engine>(std::move(model), std::move(tokenizer), std::move(config), options);
  // A pooling configuration that cannot be followed only stops embeddings, not generation.
  try {
    engine->embedding_config_ = EmbeddingConfig::load(options.model_dir);
  } catch (const Error& e) {
    engine->embedding_config_error_ = e.what();
  }
  return engine;
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
  const bool cpu = model_->device() == Device::CPU;
  // The KV budget: what the running requests' states and the prompt cache may hold together
  // (one pool: the cache gives way to running requests). By default half the memory the CPU has
  // free, or 90 % of a GPU's free memory after the weights (the rest is the steps' activations
  // and workspaces); unlimited where the backend cannot say.
  const size_t free = model_->memory_available();
  if (options_.kv_budget_bytes > 0) {
    kv_budget_ = options_.kv_budget_bytes;
  } else if (free > 0) {
    kv_budget_ = size_t(double(free) * (cpu ? 0.5 : 0.9));
  }
  if (options_.cache_bytes > kv_budget_) cache_.set_max_bytes(kv_budget_);
  // A request must fit alone: the context is at most what the budget holds for one sequence.
  if (kv_budget_ < SIZE_MAX) {
    state_fixed_bytes_ = model_->new_sequence()->bytes();  // the recurrent state, if any
    if (state_bytes_for(256) > kv_budget_)
      fail(
          "the KV budget of {:.1f} MiB (--kv-budget) cannot hold even 256 positions of this "
          "model ({:.1f} MiB)",
          double(kv_budget_) / (1 << 20), double(state_bytes_for(256)) / (1 << 20));
    int64_t fit = 256;
    while (fit < n_ctx_ && state_bytes_for(fit * 2) <= kv_budget_) fit *= 2;
    if (fit < n_ctx_) {
      log(LogLevel::Warn,
          "context length {} clamped to {}: the KV budget of {:.1f} MiB holds {} positions of "
          "one sequence (--kv-budget to change it)",
          n_ctx_, fit, double(kv_budget_) / (1 << 20), fit);
      n_ctx_ = fit;
    }
  }
  max_running_ = options_.max_running > 0 ? options_.max_running : default_max_running(cpu);
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
  if (!model_->info().generates)
    fail(
        "this checkpoint is a base model without an LM head (an embedding model): it can embed "
        "text but not generate");
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
                                  std::function<void(const GenerationDelta&)> on_delta,
                                  std::function<void(int64_t, int64_t)> on_prefill) {
  std::promise<GenerationResult> done;
  auto future = done.get_future();
  GenerationCallbacks cb;
  cb.on_delta = std::move(on_delta);
  cb.on_prefill = std::move(on_prefill);
  cb.on_done = [&done](const GenerationResult& r) { done.set_value(r); };
  submit(std::move(request), std::move(cb));
  return future.get();
}

void Engine::with_model(std::function<void(Model&)> work) {
  std::future<void> done;
  {
    std::lock_guard lock(mu_);
    if (stopping_) fail("the engine is shutting down");
    model_work_.push_back({std::move(work), {}});
    done = model_work_.back().done.get_future();
  }
  cv_.notify_all();
  done.get();
}

std::vector<float> Engine::embed(std::span<const int32_t> tokens) {
  if (!model_->has_hidden_states()) fail("this model cannot embed: it gives no hidden states");
  if (!embedding_config_error_.empty()) fail("{}", embedding_config_error_);
  if (tokens.empty()) fail("the input is empty: at least one token is needed");
  const int64_t n_vocab = model_->info().n_vocab;
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) fail("input token id {} is out of range [0, {})", t, n_vocab);
  if (int64_t(tokens.size()) > n_ctx_)
    fail("the input has {} tokens, more than this model's context of {}", tokens.size(), n_ctx_);
  std::vector<float> out;
  with_model([&](Model& model) {
    out = embed_tokens(model, tokens, embedding_config_, model.default_prefill_chunk());
  });
  return out;
}

void Engine::run_model_work() {
  std::deque<ModelWork> work;
  {
    std::lock_guard lock(mu_);
    work.swap(model_work_);
  }
  if (work.empty()) return;
  // A lone request picking ahead may have a step queued on the model: take it first.
  for (const auto& r : running_) {
    if (r->done()) continue;
    try {
      r->drain_picks();
    } catch (const std::exception& e) {
      r->finish("error", e.what());
    }
  }
  for (ModelWork& w : work) {
    try {
      w.work(*model_);
      w.done.set_value();
    } catch (...) {
      w.done.set_exception(std::current_exception());
    }
  }
}

void Engine::shutdown() {
  std::deque<Job> dropped;
  std::deque<ModelWork> dropped_work;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    dropped.swap(queue_);
    dropped_work.swap(model_work_);
  }
  cv_.notify_all();
  for (auto& w : dropped_work)
    w.done.set_exception(std::make_exception_ptr(Error("the engine is shutting down")));
  for (auto& job : dropped) {
    GenerationResult r;
    r.finish_reason = "error";
    r.error = "the server is shutting down";
    if (job.callbacks.on_done) job.callbacks.on_done(r);
  }
  if (worker_.joinable()) worker_.join();
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.waiting = queue_depth() + preempted_count_.load();
  s.running = running_count_.load();
  s.preemptions = preemptions_.load();
  s.kv_bytes = kv_bytes_in_use_.load();
  s.kv_budget = kv_budget_;
  return s;
}

bool Engine::requests_waiting() const {
  std::lock_guard lock(mu_);
  return !queue_.empty() || !model_work_.empty();
}

int64_t default_max_running(bool on_cpu) { return on_cpu ? 16 : 256; }

size_t Engine::state_bytes_for(int64_t n_tokens) const {
  // Caches hold whole blocks (kv_cache.h).
  const int64_t held = KvCache::positions_held(n_tokens);
  const double bytes =
      double(state_fixed_bytes_) + double(held) * double(model_->info().kv_bytes_per_token);
  return bytes >= double(SIZE_MAX) ? SIZE_MAX : size_t(bytes);
}

size_t Engine::bytes_in_use() const {
  size_t used = 0;
  for (const auto& r : running_)
    if (!r->done() && r->has_state()) used += r->state().bytes();
  return used;
}

size_t Engine::pool_bytes() {
  return bytes_in_use() + (options_.cache_bytes > 0 ? cache_.refresh_bytes() : 0);
}

bool Engine::make_room(size_t& pool, size_t need_beyond_pool) {
  // Dropping an entry whose blocks running requests share frees nothing: their shares grow by
  // as much as the cache's shrinks. So the pool is taken again after each drop.
  while (pool > kv_budget_ || need_beyond_pool > kv_budget_ - pool) {
    if (options_.cache_bytes == 0 || !cache_.evict_oldest()) return false;
    pool = pool_bytes();
  }
  return true;
}

size_t Engine::growth_bytes(int64_t positions, int64_t to_come) const {
  const auto more = int64_t(reserve_ratio_ * double(to_come));
  return state_bytes_for(positions + more) - state_bytes_for(positions);
}

bool Engine::admit() {
  // Preempted requests come back first, oldest first, once their prefix fits again. Room is
  // what the pool holds (the prompt cache gives way), plus a share of what the running requests
  // may still generate.
  size_t pool = pool_bytes();
  size_t used = 0;  // beyond the pool: the growth reserves and what admission takes
  for (const auto& r : running_)
    if (!r->done()) used += growth_bytes(r->positions(), r->tokens_to_come());
  for (auto& r : preempted_)
    if (r->cancel_requested()) r->finish("cancelled");
  std::erase_if(preempted_, [](const auto& r) { return r->done(); });
  while (!preempted_.empty() && int64_t(running_.size()) < max_running_) {
    RunningRequest& r = *preempted_.front();
    const size_t need =
        state_bytes_for(r.positions()) + growth_bytes(r.positions(), r.tokens_to_come());
    if (!make_room(pool, used + need) && !running_.empty()) break;
    r.resume();
    used += need;
    running_.push_back(std::move(preempted_.front()));
    preempted_.pop_front();
  }
  std::vector<Job> admitted;
  {
    std::unique_lock lock(mu_);
    if (running_.empty() && preempted_.empty())
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !model_work_.empty(); });
    if (stopping_) {  // shutdown() failed the queued ones; the running ones end cancelled
      for (auto& r : running_) r->finish("cancelled");
      for (auto& r : preempted_) r->finish("cancelled");
      preempted_.clear();
      return !queue_.empty();
    }
    // Requests cancelled while they wait leave the queue at once (a client that went away, a
    // time limit), not when their turn comes.
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (!it->request.cancel->load()) {
        ++it;
        continue;
      }
      admitted.push_back(std::move(*it));  // completed as cancelled below
      it = queue_.erase(it);
    }
    // New requests wait while a preempted one does (first come, first served), and while the
    // KV budget cannot hold their prompts next to the running ones.
    // A request that will reuse a prefix another is still prefilling waits for it, keeping its
    // place; the ones behind it go on.
    const size_t cancelled = admitted.size();
    for (auto it = queue_.begin();
         preempted_.empty() && it != queue_.end() &&
         int64_t(running_.size() + admitted.size() - cancelled) < max_running_;) {
      if (waits_for_prefix(it->request.prompt, admitted, cancelled)) {
        ++it;
        continue;
      }
      const int64_t n_prompt = int64_t(it->request.prompt.size());
      const size_t need =
          state_bytes_for(n_prompt + 1) + growth_bytes(n_prompt + 1, it->request.max_tokens);
      if (!make_room(pool, used + need) && !(running_.empty() && admitted.size() == cancelled))
        break;
      used += need;
      admitted.push_back(std::move(*it));
      it = queue_.erase(it);
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
        running_.push_back(std::make_unique<RunningRequest>(context, job.id, std::move(job.request),
                                                            std::move(job.callbacks),
                                                            job.submitted_at_ms, now));
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

bool Engine::waits_for_prefix(std::span<const int32_t> prompt, const std::vector<Job>& admitted,
                              size_t first_new) {
  constexpr size_t kBlock = size_t(KvCache::kBlockPositions);
  if (options_.cache_bytes == 0 || prompt.size() <= kBlock) return false;
  if (!state_traits_) {  // asked of a fresh state, once
    const auto probe = model_->new_sequence();
    state_traits_ = StateTraits{probe->share() != nullptr, probe->needs_checkpoints()};
  }
  if (!state_traits_->share) return false;
  // What the other prompt's cached state will serve of this one: the common prefix, or for a
  // recurrent state the checkpoint its prefill keeps within it (chunk boundaries, its end).
  const int64_t interval = std::max<int64_t>(options_.checkpoint_interval, 1);
  auto common = [&](std::span<const int32_t> other) {
    const size_t n = std::min(prompt.size() - 1, other.size());
    const auto shared =
        int64_t(std::mismatch(prompt.begin(), prompt.begin() + ptrdiff_t(n), other.begin()).first -
                prompt.begin());
    if (!state_traits_->need_checkpoints || shared == int64_t(other.size())) return shared;
    return shared / interval * interval;
  };
  int64_t longest = 0;
  for (const auto& r : running_)
    if (!r->done() && r->publishes_prompt()) longest = std::max(longest, common(r->prompt()));
  for (size_t i = first_new; i < admitted.size(); ++i)
    longest = std::max(longest, common(admitted[i].request.prompt));
  if (longest < int64_t(kBlock)) return false;
  const int64_t cached = cache_.reusable(prompt, int64_t(prompt.size()) - 1);
  return longest >= cached + int64_t(kBlock);
}

void Engine::worker_loop() {
  while (admit()) {
    std::erase_if(running_, [](const auto& r) { return r->done(); });
    run_model_work();
    step();
    // Preempted requests leave the running list for the front of the line, by arrival.
    for (auto& r : running_) {
      if (r->done() || r->has_state()) continue;
      auto at = std::upper_bound(preempted_.begin(), preempted_.end(), r,
                                 [](const auto& a, const auto& b) { return a->id() < b->id(); });
      preempted_.insert(at, std::move(r));
    }
    std::erase_if(running_, [](const auto& r) { return !r || r->done(); });
    running_count_ = running_.size();
    preempted_count_ = preempted_.size();
    kv_bytes_in_use_ = bytes_in_use();
  }
}

void Engine::give_way_to_memory(const std::vector<RunningRequest*>& ran, const std::string& what) {
  if (ran.size() == 1) return ran[0]->finish("error", what);
  const size_t was = kv_budget_;
  kv_budget_ = std::max(state_bytes_for(256), pool_bytes() / 10 * 9);
  log(LogLevel::Warn,
      "{}: the KV budget goes from {:.1f} to {:.1f} MiB and the step's {} requests recompute "
      "later",
      what, double(was) / (1 << 20), double(kv_budget_) / (1 << 20), ran.size());
  for (RunningRequest* r : ran) {
    if (r->done() || !r->has_state()) continue;
    r->preempt();
    preemptions_.fetch_add(1);
  }
}

void Engine::step() {
  reserve_ratio_ = std::max(kMinReserve, reserve_ratio_ - kReserveDecay);
  for (const auto& r : running_)
    if (!r->done() && r->cancel_requested()) r->finish("cancelled");
  std::vector<RunningRequest*> live;
  for (const auto& r : running_)
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

  // The step's plan: a decode token for each request past its prompt, then prompt chunks, oldest
  // request first, within the token budget.
  struct Part {
    RunningRequest* r;
    int64_t n;      // tokens
    int32_t input;  // a decode step's token; -1 for a prompt chunk
  };
  std::vector<Part> plan;
  for (RunningRequest* r : live) {
    if (r->done() || r->prefilling()) continue;
    const std::optional<int32_t> input = r->decode_input();
    if (!input) continue;  // context full: finished "length"
    plan.push_back({r, 1, *input});
  }
  const int64_t n_decode = int64_t(plan.size());
  const int64_t chunk =
      options_.prefill_chunk > 0 ? options_.prefill_chunk : model_->default_prefill_chunk();
  int64_t budget = (n_decode > 0 ? max_step_tokens_ : chunk) - n_decode;
  for (RunningRequest* r : live) {
    if (budget <= 0) break;
    if (r->done() || !r->prefilling()) continue;
    const int64_t n = int64_t(r->prompt_chunk(std::min(budget, chunk)).size());
    plan.push_back({r, n, -1});
    budget -= n;
  }
  // The KV budget: while the step would not fit, the prompt cache gives way, then the latest
  // arrival (preempted: its state is freed, and it recomputes when there is room again), as vLLM
  // does.
  auto projected = [&] {
    size_t total = 0;  // the growth of the states the step writes
    for (RunningRequest* r : live) {
      if (r->done() || !r->has_state()) continue;
      int64_t n = 0;
      for (const Part& p : plan)
        if (p.r == r) n = p.n;
      const size_t after = r->state().bytes_after(n), now = r->state().bytes();
      total += after > now ? after - now : 0;
    }
    return total;
  };
  size_t pool = pool_bytes();
  for (size_t need = projected(); !make_room(pool, need);) {
    RunningRequest* victim = nullptr;
    int holding = 0;
    for (RunningRequest* r : live) {
      if (r->done() || !r->has_state()) continue;
      ++holding;
      if (!victim || r->id() > victim->id()) victim = r;
    }
    if (!victim) break;
    if (holding <= 1) {  // the context bound keeps this from happening: a request fits alone
      victim->finish("error", fmt::format("the KV cache budget of {} bytes cannot hold this "
                                          "request's next step ({} bytes)",
                                          kv_budget_.load(), pool + need));
    } else {
      victim->preempt();
      preemptions_.fetch_add(1);
      reserve_ratio_ = kMaxReserve;  // admission was too hopeful: reserve all room again
    }
    std::erase_if(plan, [&](const Part& p) { return p.r == victim; });
    need = projected();
    pool = pool_bytes();
    if (holding <= 1) break;
  }
  if (plan.empty()) return;

  // Each part's last row gives its request's next token: as logits to the host, or picked by
  // the backend where the request allows (then only the id comes back).
  std::vector<Model::BatchItem> items;
  std::vector<TokenPick> picks(plan.size());
  std::vector<int32_t> picked(plan.size(), -1);
  for (size_t i = 0; i < plan.size(); ++i) {
    RunningRequest* r = plan[i].r;
    const bool decode = plan[i].input >= 0;
    Model::BatchItem item{&r->state(), decode ? std::span<const int32_t>(&plan[i].input, 1)
                                              : r->prompt_chunk(plan[i].n)};
    if (!decode) r->plan_checkpoints(plan[i].n);
    if (decode || r->chunk_wants_logits(plan[i].n)) {
      if (r->picks_on_backend()) {
        picks[i] = r->next_pick();
        item.pick = &picks[i];
        item.token = &picked[i];
      } else {
        item.logits = r->logits();
      }
    }
    items.push_back(item);
  }
  try {
    model_->forward_batch(items);
  } catch (const OutOfMemory& e) {
    std::vector<RunningRequest*> ran;
    for (const Part& p : plan) ran.push_back(p.r);
    give_way_to_memory(ran, e.what());
    return;
  } catch (const std::exception& e) {
    for (const Part& p : plan) p.r->finish("error", e.what());
    return;
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    RunningRequest* r = plan[i].r;
    const std::span<float> logits(items[i].logits, items[i].logits ? size_t(info().n_vocab) : 0);
    const auto token = items[i].pick ? std::optional<int32_t>(picked[i]) : std::nullopt;
    try {
      if (plan[i].input >= 0)
        r->token_ran(logits, token);
      else
        r->prompt_chunk_ran(plan[i].n, logits, token);
    } catch (const std::exception& e) {
      r->finish("error", e.what());
    }
  }
}

}  // namespace hearth
