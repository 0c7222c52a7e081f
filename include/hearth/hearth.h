// hearth's C++ API: load a model, submit completion or chat requests, stream their text, cancel
// them, read the engine's counters. This header and hearth/error.h are the library's whole public
// surface (hearth/server.h adds the HTTP server, a library of its own); nothing of the engine's
// internals is exposed, so they can change without breaking programs built against it. Link with
// the installed CMake package (find_package(hearth), target hearth::hearth) or pkg-config
// (hearth). See examples/embed.cpp.
//
// Threads: a Runtime may be used from any number of threads. Requests run on the engine's own
// thread; on_text callbacks are called there, in order, and should return quickly. Every
// submitted request completes exactly once (finished, cancelled, failed, or the Runtime
// destroyed), and wait() returns its Completion.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hearth/error.h"

namespace hearth {

struct RuntimeOptions {
  std::string model;           // a Hugging Face checkpoint directory (config.json, safetensors)
  std::string device = "cpu";  // "cpu", "cuda", "cuda:N", or "auto" (CUDA when present)
  int64_t context = 0;         // tokens per sequence; 0: the model's own maximum
  int threads = 0;             // CPU threads; 0: the CPUs this process may use
  // Requests run together, their tokens sharing each step (the rest wait in line); 0: 16 on
  // the CPU, 256 on a GPU.
  int parallel = 0;
  // Tokens one step may run (decode tokens and prompt chunks); 0: 128 on the CPU, the prefill
  // chunk on a GPU.
  int64_t max_batch_tokens = 0;
  // Bytes the running requests' KV caches and states and the prompt cache may hold together
  // (the cache gives way first, then the latest request is preempted and recomputed later); 0:
  // half the free RAM on the CPU, 90 % of the free GPU memory after loading.
  uint64_t kv_budget_bytes = 0;
  // Bytes the prompt cache may hold at most (within kv_budget_bytes): the states of earlier
  // prompts, so a request that starts with one (the next turn of a chat) skips its prefill; 0
  // turns it off.
  uint64_t prompt_cache_bytes = uint64_t{8192} << 20;
  // CPU weights are read in place from the mapped files; false copies them into huge-page memory
  // (a slower load, a faster decode).
  bool mmap = true;
  // Batch-invariant kernels: a request's tokens are bit-identical whatever other requests share
  // its steps (CPU only; prefill is slower).
  bool deterministic = false;
  // Tensor parallelism: the model split over this many ranks, one thread each with an equal
  // share of `threads` (the llama and Qwen3.5 families on the CPU only for now; the heads and
  // the MLP width must divide by it). 1: one whole model.
  int tensor_parallel = 1;
};

struct ChatTurn {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// Unset sampling fields take the model's generation_config.json values (greedy when it has none).
struct CompletionRequest {
  std::string prompt;              // raw text, tokenized as is; used when messages is empty
  std::vector<ChatTurn> messages;  // a chat, rendered with the model's chat template
  int64_t max_tokens = 256;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // stop strings; the text ends before the one matched
};

struct Completion {
  std::string text;
  std::string finish_reason;  // "stop", "length", "cancelled" or "error"
  std::string error;          // what went wrong, when finish_reason is "error"
  int64_t prompt_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // of prompt_tokens, reused from the prompt cache
  int64_t completion_tokens = 0;
  double time_to_first_token_ms = 0;  // from submit, queueing included
  double decode_tokens_per_s = 0;
};

struct RuntimeMetrics {
  int64_t requests_waiting = 0;   // queued (and preempted, waiting to recompute)
  int64_t requests_running = 0;   // in the engine's batch
  int64_t preemptions = 0;        // requests preempted for KV memory since load
  int64_t requests_finished = 0;  // completed in any way since load
  int64_t prompt_tokens = 0;      // over finished requests
  int64_t completion_tokens = 0;
  int64_t prompt_cache_hit_tokens = 0;
};

// A submitted request. Copies share it; the request runs whether or not a handle is kept.
class Generation {
 public:
  void cancel();      // stops it at its next token (a no-op once it is done)
  bool done() const;  // its Completion is ready
  Completion wait();  // blocks until done

 private:
  friend class Runtime;
  struct State;
  explicit Generation(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

class Runtime {
 public:
  // Loads the model, its tokenizer and generation defaults; throws hearth::Error naming what
  // is wrong (a missing file, an unsupported architecture, a bad device).
  static std::unique_ptr<Runtime> load(const RuntimeOptions& options);
  // Cancels the running requests (finish_reason "cancelled") and completes the waiting ones
  // with finish_reason "error"; every Generation's wait() returns.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Queues a request. A request that can never run (empty prompt, over the context, impossible
  // sampling values) throws hearth::Error here and is not queued. on_text receives the text as
  // it is generated; the pieces concatenate to Completion::text.
  Generation submit(const CompletionRequest& request,
                    std::function<void(std::string_view text)> on_text = {});
  // submit() and wait().
  Completion complete(const CompletionRequest& request,
                      std::function<void(std::string_view text)> on_text = {});

  RuntimeMetrics metrics() const;
  std::string model_type() const;  // config.json's model_type, e.g. "qwen3"
  int64_t context() const;         // tokens per sequence

 private:
  // Hands the engine to the HTTP server library (hearth/server.h), whose routes use features of
  // the engine this API does not offer yet; not part of the API.
  friend struct RuntimeInternals;
  struct Impl;
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth
