// The engine's worker: one request at a time, prompt cache lookup, checkpointed chunked prefill,
// then sample/decode with streaming text, stop strings, logprobs and cancellation between
// tokens. The hot loop does not throw; anything that does is turned into finish_reason "error".
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>

#include "core/error.h"
#include "core/log.h"
#include "runtime/generate.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// log-softmax of the raw logits: the chosen token's logprob and the top `n` alternatives.
TokenLogprob compute_logprobs(std::span<const float> logits, int32_t chosen, int n) {
  float max = -INFINITY;
  for (float v : logits) max = std::max(max, v);
  double sum = 0;
  for (float v : logits) sum += std::exp(double(v - max));
  const float log_z = max + float(std::log(sum));
  TokenLogprob out;
  out.token = chosen;
  out.logprob = logits[size_t(chosen)] - log_z;
  if (n > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
    const size_t k = std::min(size_t(n), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + ptrdiff_t(k), ids.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[size_t(a)] > logits[size_t(b)] ||
                               (logits[size_t(a)] == logits[size_t(b)] && a < b);
                      });
    for (size_t i = 0; i < k; ++i) out.top.emplace_back(ids[i], logits[size_t(ids[i])] - log_z);
  }
  return out;
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
    if (running_cancel_) running_cancel_->store(true);
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

void Engine::worker_loop() {
  for (;;) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    Job job = std::move(queue_.front());
    queue_.pop_front();
    running_cancel_ = job.request.cancel;
    if (stopping_) running_cancel_->store(true);
    lock.unlock();

    GenerationResult result;
    try {
      result = run(job);
    } catch (const std::exception& e) {
      result.finish_reason = "error";
      result.error = e.what();
    }
    lock.lock();
    running_cancel_.reset();
    lock.unlock();
    if (job.callbacks.on_done) job.callbacks.on_done(result);
  }
}

GenerationResult Engine::run(Job& job) {
  const GenerationRequest& req = job.request;
  GenerationResult result;
  const double t_start = now_ms();
  result.timings.queue_ms = t_start - job.submitted_at_ms;
  if (req.cancel->load()) {
    result.finish_reason = "cancelled";
    return result;
  }
  validate(req);
  const int64_t n_prompt = int64_t(req.prompt.size());
  const int64_t n_vocab = model_->info().n_vocab;

  // Prompt cache: reuse the longest common prefix, but always run the last prompt token.
  std::vector<int64_t> checkpoints;
  std::unique_ptr<SequenceState> state;
  if (options_.cache_bytes > 0) {
    auto hit = cache_.acquire(req.prompt, n_prompt - 1);
    state = std::move(hit.state);
    result.usage.cached_tokens = hit.n_reused;
    checkpoints = std::move(hit.checkpoints);
  }
  if (!state) state = model_->new_sequence();
  result.usage.prompt_tokens = n_prompt;

  std::vector<int32_t> history(req.prompt.begin(), req.prompt.end());
  auto give_back = [&] {
    if (options_.cache_bytes == 0) return;
    // A state past the history (a step picked ahead on a token that was then not kept, and a
    // recurrent state that cannot be cut back) matches no token list: not cached.
    if (state->n_past() > int64_t(history.size())) return;
    const int64_t n = std::min<int64_t>(state->n_past(), int64_t(history.size()));
    if (n <= 0) return;
    cache_.release(std::vector<int32_t>(history.begin(), history.begin() + n), std::move(state),
                   std::move(checkpoints));
  };

  // Prefill in chunks; states with recurrent layers end them on checkpoint boundaries, so a later
  // prompt can resume there (attention-only states go back anywhere: their chunks stay whole).
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  const bool checkpointed = state->needs_checkpoints();
  const int64_t interval = std::max<int64_t>(options_.checkpoint_interval, 1);
  const int64_t chunk =
      options_.prefill_chunk > 0 ? options_.prefill_chunk : model_->default_prefill_chunk();
  for (int64_t pos = state->n_past(); pos < n_prompt;) {
    if (req.cancel->load()) {
      result.finish_reason = "cancelled";
      give_back();
      return result;
    }
    const int64_t next_cp = checkpointed ? (pos / interval + 1) * interval : n_prompt;
    const int64_t end = std::min({n_prompt, pos + chunk, next_cp});
    const bool last = end == n_prompt;
    model_->forward(*state,
                    std::span<const int32_t>(req.prompt).subspan(size_t(pos), size_t(end - pos)),
                    last ? LogitsRows::Last : LogitsRows::None, last ? logits.data() : nullptr);
    if ((checkpointed && end % interval == 0) || last) {
      state->keep_checkpoint();
      checkpoints.push_back(end);
    }
    pos = end;
  }

  Sampler sampler(req.sampling, n_vocab);
  std::vector<int32_t> stop_ids = req.stop_token_ids;
  if (!req.ignore_eos)
    for (int64_t id : model_->info().eos_token_ids) stop_ids.push_back(int32_t(id));
  std::optional<StreamDecoder> decoder;
  if (tokenizer_) decoder.emplace(*tokenizer_, req.skip_special_tokens);
  StopStringFilter stops(req.stop);
  GenerationDelta pending;  // tokens/logprobs waiting for their text to be released
  auto emit = [&](std::string text, bool force) {
    if (text.empty() && !force) return;
    if (text.empty() && pending.tokens.empty()) return;
    pending.text = std::move(text);
    result.text += pending.text;
    if (job.callbacks.on_delta) job.callbacks.on_delta(pending);
    pending = GenerationDelta{};
  };

  result.finish_reason = "length";
  std::vector<float> raw;
  double t_first = 0;
  // After the first token (from the prefill's logits), a GPU picks each token where the logits
  // are and the next step is queued before this one's token is taken (Model::queue_pick), so
  // detokenizing and streaming a token overlap the next step. Logprobs, penalties and logit
  // bias need the logits on the host, one step at a time.
  const bool ahead = model_->picks_ahead() && sampler.backend_can_pick() && req.logprobs < 0;
  QueuedPicks queued(*model_);
  // Runs the step that gives token i >= 1; false when the context is full ("length"). Picking
  // ahead, the token comes back in `picked`; else the step's logits are in `logits`.
  auto decode_step = [&](int64_t i, std::optional<int32_t>& picked) {
    if (!ahead) {
      if (state->n_past() >= n_ctx_) return false;
      model_->forward(*state, std::span<const int32_t>(&history.back(), 1), LogitsRows::Last,
                      logits.data());
      return true;
    }
    if (queued.n == 0) {
      if (state->n_past() >= n_ctx_) return false;
      model_->queue_pick(*state, history.back(), sampler.next_pick());
      ++queued.n;
    }
    if (i + 1 < req.max_tokens && state->n_past() < n_ctx_) {
      model_->queue_pick(*state, Model::kPickedToken, sampler.next_pick());
      ++queued.n;
    }
    --queued.n;
    picked = model_->take_pick();
    return true;
  };
  for (int64_t i = 0; i < req.max_tokens; ++i) {
    std::optional<int32_t> picked;
    if (i > 0 && !decode_step(i, picked)) break;  // context full: "length"
    if (req.cancel->load()) {
      result.finish_reason = "cancelled";
      break;
    }
    std::optional<TokenLogprob> lp;
    if (req.logprobs >= 0) raw.assign(logits.begin(), logits.end());  // sample() edits logits
    const int32_t token = picked ? *picked : sampler.sample(logits, history);
    if (req.logprobs >= 0) lp = compute_logprobs(raw, token, req.logprobs);
    if (i == 0) {
      t_first = now_ms();
      result.timings.prefill_ms = t_first - t_start;
      result.timings.ttft_ms = t_first - job.submitted_at_ms;
    }
    history.push_back(token);
    result.tokens.push_back(token);
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) {
      result.finish_reason = "stop";
      result.stop_token = token;
      if (lp) pending.logprobs.push_back(*lp), result.logprobs.push_back(*lp);
      pending.tokens.push_back(token);
      break;
    }
    pending.tokens.push_back(token);
    if (lp) pending.logprobs.push_back(*lp), result.logprobs.push_back(*lp);
    if (decoder) {
      std::string safe = stops.push(decoder->push(token));
      if (stops.matched()) {
        emit(std::move(safe), true);
        result.finish_reason = "stop";
        result.stop_string = stops.matched_stop();
        break;
      }
      emit(std::move(safe), false);
    } else {
      emit(std::string(), true);
    }
  }
  if (queued.n > 0) {
    // The step queued after the last token ran on a token the loop then stopped at (or was
    // cancelled after): its pick is dropped and the state cut back to before its input where it
    // can be; a recurrent state keeps it (give_back caches it only if history holds it).
    model_->take_pick();
    --queued.n;
    state->truncate(state->n_past() - 1);
  }
  if (decoder && !stops.matched()) {
    std::string tail = stops.push(decoder->flush());
    if (stops.matched()) {
      result.finish_reason = "stop";
      result.stop_string = stops.matched_stop();
    } else {
      tail += stops.flush();
    }
    emit(std::move(tail), !pending.tokens.empty());
  } else if (!pending.tokens.empty()) {
    emit(std::string(), true);
  }
  result.usage.completion_tokens = int64_t(result.tokens.size());
  result.timings.decode_tokens = int64_t(result.tokens.size());
  if (t_first > 0) result.timings.decode_ms = now_ms() - t_first;
  give_back();
  return result;
}

}  // namespace hearth
