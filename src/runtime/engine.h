// Engine: the one object front ends (HTTP server, CLI, tests) talk to. It owns the model, the
// tokenizer and the prompt cache, and serves generation requests on one worker thread with
// iteration-level scheduling: every step runs the next token of each running request and chunks
// of waiting prompts through one Model::forward_batch, so requests join at the next step and
// leave as soon as they finish (docs/design-notes.md, "The engine loop"). Requests are admitted
// first come, first served. It knows nothing of HTTP or chat formats.
// Invariants: callbacks run on the worker thread, in order per request, and on_done runs exactly
// once per submitted request, whatever happens (finished, cancelled, shut down, failed); streamed
// text deltas concatenate to the final text, and never contain any part of a matched stop string.
// logprobs are those of the raw model distribution (log-softmax of the logits before penalties,
// bias and temperature), as vLLM's default and OpenAI report them.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "kv/prompt_cache.h"
#include "loader/config.h"
#include "models/model.h"
#include "runtime/embedding.h"
#include "runtime/sampler.h"

namespace hearth {

class RunningRequest;
class Tokenizer;

struct EngineOptions {
  std::string model_dir;
  std::string device = "cpu";
  std::function<void(size_t done_bytes, size_t total_bytes)>
      load_progress;                        // LoadOptions::progress
  bool mmap = true;                         // LoadOptions::mmap
  bool deterministic = false;               // LoadOptions::deterministic
  int tensor_parallel = 1;                  // LoadOptions::tensor_parallel
  int64_t n_ctx = 0;                        // 0: the model's max_position_embeddings
  size_t cache_bytes = size_t{8192} << 20;  // prompt cache cap; 0 disables it
  int64_t prefill_chunk = 0;                // tokens per prefill forward; 0: the model's default
  int64_t checkpoint_interval = 256;        // keep_checkpoint() every N prompt positions
  int64_t max_running = 0;  // requests decoding together; 0: 16 on the CPU, 256 on a GPU
  // Bytes the running requests' sequence states (KV caches, recurrent states) and the prompt
  // cache may hold together: one pool, where the cache gives way first (least recently used
  // entries dropped). 0: half the free RAM on the CPU, 90 % of the free GPU memory after
  // loading. When a step would not fit once the cache is empty, the latest request is preempted
  // and recomputed later. The context is clamped to what one sequence can hold in it.
  size_t kv_budget_bytes = 0;
  // Tokens in a step while requests are decoding (their tokens plus prompt chunks): the bound on
  // how long a prompt may hold up everyone's next token. 0: 128 on the CPU, the prefill chunk
  // on a GPU. A step with nothing decoding runs a whole prefill chunk.
  int64_t max_step_tokens = 0;
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // non-empty, ids < n_vocab
  int64_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;        // stop strings, matched on the decoded text
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // in the decoded text (tool/think tags are not special)
  int logprobs = -1;                // -1: none; N >= 0: chosen token's and top N
  std::shared_ptr<std::atomic<bool>> cancel;  // set it to stop at the next token (optional)
};

struct GenerationUsage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens taken from the prompt cache
};

struct GenerationTimings {
  double queue_ms = 0;    // submit → the worker picked it up
  double prefill_ms = 0;  // the worker's prefill up to the first sampled token
  double ttft_ms = 0;     // submit → first token sampled
  double decode_ms = 0;   // first token → last token
  int64_t decode_tokens = 0;
};

struct GenerationDelta {
  std::string text;
  std::vector<int32_t> tokens;         // tokens whose text is (mostly) in this delta
  std::vector<TokenLogprob> logprobs;  // one per token when requested
};

struct GenerationResult {
  std::vector<int32_t> tokens;
  std::string text;           // decoded, cut before a matched stop string
  std::string finish_reason;  // "stop", "length", "cancelled" or "error"
  std::string stop_string;    // the stop string that ended it, if one did
  std::optional<int32_t> stop_token;
  std::string error;  // when finish_reason is "error"
  GenerationUsage usage;
  GenerationTimings timings;
  std::vector<TokenLogprob> logprobs;
};

// The engine's load, as of its last step.
struct EngineStats {
  size_t waiting = 0;        // queued and preempted requests
  size_t running = 0;        // requests in the engine's steps
  uint64_t preemptions = 0;  // since start
  size_t kv_bytes = 0;       // held by the running requests' sequence states
  size_t kv_budget = 0;      // SIZE_MAX: no budget
};

struct GenerationCallbacks {
  std::function<void(const GenerationDelta&)> on_delta;  // worker thread; keep it quick
  std::function<void(const GenerationResult&)> on_done;  // exactly once
  // After each chunk of the prompt's prefill: the prompt tokens the state holds (a cached prefix
  // included) and the prompt's length (not called again when a preempted request recomputes).
  std::function<void(int64_t done, int64_t total)> on_prefill;
};

// Streaming stop-string matcher: push decoded text, get what is safe to emit. Text that could
// still be the start of a stop string is held back until it is disproven or flushed.
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  // Appends `text`; returns the text now safe to emit. After a match, matched() is set and the
  // returned text ends right before the stop string; later pushes return "".
  std::string push(const std::string& text);
  // End of generation: the held-back text (empty after a match).
  std::string flush();
  bool matched() const { return matched_ >= 0; }
  const std::string& matched_stop() const;

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // received, not yet emitted
  int matched_ = -1;
};

// The running cap when EngineOptions::max_running is 0: 16 on the CPU (a step of 16 rows is
// already compute-bound there), 256 on a GPU.
int64_t default_max_running(bool on_cpu);

class Engine {
 public:
  // Loads DIR's model, tokenizer (when tokenizer.json is present) and generation_config.json.
  static std::unique_ptr<Engine> load(const EngineOptions& options);
  // For tests and embedders: an already-built model; tokenizer may be null (token ids only).
  Engine(std::unique_ptr<Model> model, std::shared_ptr<const Tokenizer> tokenizer,
         ModelConfig config, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Throws hearth::Error naming the field when the request cannot run (empty prompt, ids out
  // of range, prompt + max_tokens over the context, bad sampling values).
  void validate(const GenerationRequest& request) const;
  // Queues a request (first come, first served). Returns its id. After shutdown() it completes
  // at once with an error.
  uint64_t submit(GenerationRequest request, GenerationCallbacks callbacks);
  // submit() and wait.
  GenerationResult generate(GenerationRequest request,
                            std::function<void(const GenerationDelta&)> on_delta = {},
                            std::function<void(int64_t, int64_t)> on_prefill = {});
  // Cancels the running requests, fails queued ones ("shutting down"), stops the worker.
  void shutdown();
  // Runs `work` on the engine's thread between two steps, with the model to itself (a model
  // runs one forward at a time): embeddings go through here. Blocks until it has run and
  // rethrows what it threw; throws hearth::Error after shutdown().
  void with_model(std::function<void(Model&)> work);
  // The embedding of `tokens` (runtime/embedding.h) as the checkpoint's sentence-transformers
  // files say (read by load(); the default pooling otherwise), computed between steps. Throws
  // hearth::Error naming the problem: empty, out-of-range ids, longer than the context, or a
  // pooling configuration hearth cannot follow.
  std::vector<float> embed(std::span<const int32_t> tokens);
  const EmbeddingConfig& embedding_config() const { return embedding_config_; }

  const ModelInfo& info() const { return model_->info(); }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const ModelConfig& config() const { return config_; }
  const SamplingParams& default_sampling() const { return default_sampling_; }
  int64_t n_ctx() const { return n_ctx_; }
  size_t queue_depth() const;
  size_t kv_budget() const { return kv_budget_; }
  uint64_t preemptions() const { return preemptions_.load(); }
  EngineStats stats() const;
  PromptCacheStats cache_stats() const { return cache_.stats(); }

 private:
  struct Job {
    uint64_t id;
    GenerationRequest request;
    GenerationCallbacks callbacks;
    double submitted_at_ms;
  };
  void worker_loop();
  // The with_model() work queued so far, run in arrival order.
  void run_model_work();
  // Admits preempted, then queued requests up to max_running and the KV budget; false when
  // stopping and nothing is left.
  bool admit();
  // Whether a queued prompt waits for the prefill of a request that shares a block or more of
  // it (running, or admitted in this round from admitted[first_new..]) beyond what the prompt
  // cache holds: when that prefill ends its state is cached and shared, and this one skips the
  // common prefix instead of computing it again.
  bool waits_for_prefix(std::span<const int32_t> prompt, const std::vector<Job>& admitted,
                        size_t first_new);
  // One step of the running requests (those it finishes are done() afterwards, those it
  // preempts have no state).
  void step();
  bool requests_waiting() const;
  // An upper bound of a sequence state's bytes once it holds n_tokens positions.
  size_t state_bytes_for(int64_t n_tokens) const;
  size_t bytes_in_use() const;
  // The pool's bytes in use: the running requests' states and the prompt cache's (shared blocks
  // counted once, for their share in each holder).
  size_t pool_bytes();
  // Drops prompt cache entries, oldest first, while `need_beyond_pool` more bytes would not fit
  // in the budget next to the pool (`pool`: pool_bytes(), taken again after each drop); whether
  // they fit now.
  bool make_room(size_t& pool, size_t need_beyond_pool);
  // The device ran out of memory in a step that `ran` these requests (more went to activations,
  // workspaces or other processes than the budget foresaw). The step may have run in part, and
  // a recurrent state it updated cannot be trusted, so they are preempted (they recompute when
  // there is room, as under the budget) rather than failed, and the budget shrinks to nine
  // tenths of what the pool holds. A request that ran alone fails with the error.
  void give_way_to_memory(const std::vector<RunningRequest*>& ran, const std::string& what);

  struct ModelWork {
    std::function<void(Model&)> work;
    std::promise<void> done;
  };
  std::deque<ModelWork> model_work_;  // guarded by mu_
  EmbeddingConfig embedding_config_;
  std::string embedding_config_error_;  // why the checkpoint's pooling files cannot be followed
  std::unique_ptr<Model> model_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  ModelConfig config_;
  EngineOptions options_;
  SamplingParams default_sampling_;
  int64_t n_ctx_ = 0;
  PromptCache cache_;
  int64_t max_running_ = 0, max_step_tokens_ = 0;
  std::atomic<size_t> kv_budget_ = SIZE_MAX;  // lowered by give_way_to_memory
  // Admission counts, beside what the states hold, room for this share of the tokens each
  // running request may still generate (SGLang's new-token ratio): all of them after a
  // preemption, then less each step while none is needed (requests that stop early leave room
  // a full reserve would keep idle). Preemption recomputes a request, so it costs more than a
  // request that waits.
  static constexpr double kMaxReserve = 1.0, kMinReserve = 0.1, kReserveDecay = 0.0015;
  double reserve_ratio_ = kMaxReserve;
  // The growth room of a request holding `positions` that may generate `to_come` more.
  size_t growth_bytes(int64_t positions, int64_t to_come) const;
  size_t state_fixed_bytes_ = 0;
  // Of this model's states: whether SequenceState::share works, and whether they only go back
  // to checkpoints (recurrent). Asked of a fresh state when first needed.
  struct StateTraits {
    bool share = false;
    bool need_checkpoints = false;
  };
  std::optional<StateTraits> state_traits_;
  std::atomic<uint64_t> preemptions_{0};
  std::atomic<size_t> running_count_{0}, preempted_count_{0}, kv_bytes_in_use_{0};
  // The worker's: requests running (admission order), and preempted ones (arrival order).
  std::vector<std::unique_ptr<RunningRequest>> running_;
  std::deque<std::unique_ptr<RunningRequest>> preempted_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  uint64_t next_id_ = 1;
  std::thread worker_;
};

}  // namespace hearth
