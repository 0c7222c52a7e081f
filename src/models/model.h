// Model: the interface every architecture implements, and load_model(), which picks the
// architecture from config.json's model_type through the registry.
// A model owns its weights (views into the mapped checkpoint) and its scratch memory; the
// per-sequence state (KV cache, recurrent state) lives in a SequenceState it creates.
// forward() is not re-entrant: one forward at a time per Model.
#pragma once
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "loader/config.h"

namespace hearth {

class WeightStore;

struct ModelInfo {
  std::string model_type;
  std::string architecture;  // e.g. "llama-family decoder (qwen3)"
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;  // max_position_embeddings
  // KV cache bytes per position over all attention layers as if none slid (a sliding layer
  // keeps at most its window): the engine bounds a requested context length by it.
  int64_t kv_bytes_per_token = 0;
  int64_t n_params = 0;
  size_t weight_bytes = 0;
  std::string dtypes;  // "BF16: 1.19 GB"
  // Per storage format of the weights in use: weights, bytes, bits per weight
  // ("affine 4-bit g64: 12.3 M weights, 6.90 MB, 4.50 bits/weight; BF16: ...").
  std::string formats;
  std::vector<int64_t> eos_token_ids;
  // False for a base model saved without its LM head (an embedding model such as
  // Qwen3-Embedding-8B): it embeds (LogitsRows::Hidden) but cannot generate.
  bool generates = true;
  // Per decoded token: the weight bytes read and the parameters multiplied — every weight but
  // the embedding table when the head has its own (a lookup reads one row), the MTP head (not
  // run), and in MoE layers only the routed experts. `hearth bench` divides by these to print
  // achieved GB/s (decode) and TFLOP/s (prefill, 2 FLOPs a parameter, attention not counted).
  size_t decode_bytes = 0;
  int64_t active_params = 0;
  // Parameters of the output head (part of active_params): a prefill computes logits for its
  // last token only, so its FLOPs per prompt token leave the head out.
  int64_t head_params = 0;
};

// Per-sequence state: the positions already processed and whatever they left behind.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  virtual int64_t n_past() const = 0;
  // Forget positions >= n; false when the state cannot go back that far. Attention-only
  // states can go back anywhere (within a sliding window's reach); recurrent states only to a
  // position where they kept a checkpoint.
  virtual bool truncate(int64_t n) = 0;
  // Asks the state to remember the current position so truncate() can return to it later
  // (recurrent layers snapshot their state; attention KV needs nothing). Cheap to call.
  virtual void keep_checkpoint() {}
  // True when truncate() needs checkpoints (recurrent layers): a chunked prefill then keeps them
  // on checkpoint boundaries so a later prompt can resume there.
  virtual bool needs_checkpoints() const { return false; }
  // Asks for checkpoints inside the next forward: at each position p (n_past() < p < n_past() +
  // its tokens, increasing), as keep_checkpoint() would keep one had a forward ended at p. The
  // model keeps them as its layers pass p, so a prompt need not be cut into steps at each
  // checkpoint. States that need no checkpoints ignore it.
  virtual void keep_checkpoints_within(std::span<const int64_t> positions) { (void)positions; }
  // The memory held (a part shared with other states counts for its share).
  virtual size_t bytes() const = 0;
  // bytes() once n_more more positions are stored: what a step of n_more tokens will need.
  virtual size_t bytes_after(int64_t n_more) const = 0;
  // A state holding the same positions that shares this one's memory until either writes
  // (copy on write): how requests with a common prefix share it. Null where the state cannot be
  // shared cheaply (recurrent layers, the CUDA backend's KV rings).
  virtual std::unique_ptr<SequenceState> share() const { return nullptr; }
};

// Which rows of a forward come back: none, the last token's logits, every token's logits, or
// (Hidden) no head at all: every token's final hidden state, after the model's last norm
// ([n_tokens, n_embd] f32, transformers' last_hidden_state), which embeddings pool.
enum class LogitsRows : uint8_t { None, Last, All, Hidden };

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // The checkpoint the weights come from (names and provenance of the views the backend gets),
  // or nullptr.
  virtual const WeightStore* weight_store() const { return nullptr; }
  virtual std::unique_ptr<SequenceState> new_sequence() const = 0;
  // Runs `tokens` at positions n_past().. of `state` and appends them to it. Writes logits for
  // the requested rows into logits ([n_rows, n_vocab] f32; with LogitsRows::Hidden the hidden
  // states, [n_tokens, n_embd]). Token ids must be < n_vocab.
  virtual void forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
                       float* logits) = 0;
  // Whether forward() gives LogitsRows::Hidden (every architecture does; stand-ins such as the
  // tests' scripted models do not), so embeddings can be refused instead of misread.
  virtual bool has_hidden_states() const { return false; }
  // One step of several sequences: each item's tokens run at the next positions of its state
  // (distinct states; a decode token or a chunk of prompt), and an item with a logits pointer
  // gets its last token's logits there ([n_vocab] f32); one with a pick gets instead the token
  // picked from those logits where they are (forward_pick's pick: on a GPU only the id crosses
  // to the host). A model that overrides it reads its weights once for all rows (the linear
  // layers take every item's rows as one product; attention runs per sequence, on its own KV);
  // the default runs the items in turn.
  struct BatchItem {
    SequenceState* state = nullptr;
    std::span<const int32_t> tokens;  // non-empty
    float* logits = nullptr;          // the last token's logits, or nullptr: none
    const TokenPick* pick = nullptr;  // with logits null: pick the next token ...
    int32_t* token = nullptr;         // ... into *token
  };
  virtual void forward_batch(std::span<const BatchItem> items);
  // forward_batch's argument checks: a state and at least one token per item, no state twice.
  static void check_batch(std::span<const BatchItem> items);
  // forward(state, tokens, LogitsRows::Last, ...) and the next token picked from that row as
  // `pick` says. Models that override it let their backend pick where the logits are (on a GPU
  // only the token id crosses to the host); the default picks on the host.
  virtual int32_t forward_pick(SequenceState& state, std::span<const int32_t> tokens,
                               const TokenPick& pick);

  // Picking ahead: queue_pick runs forward_pick's one-token step without waiting for its token,
  // so the host records and launches the next step while the device runs this one (on a GPU the
  // host's work and the launch then overlap the previous step; docs/cuda.md). `token` is the
  // input id, or kPickedToken: the token the previous queued step picks, which then does not
  // cross to the host before this step runs. take_pick() returns the oldest queued step's token,
  // waiting for it. The state advances when a step is queued. picks_ahead() says whether
  // queueing overlaps anything; where it does not, queue_pick runs the step at once.
  static constexpr int32_t kPickedToken = -1;
  virtual bool picks_ahead() const { return false; }
  virtual void queue_pick(SequenceState& state, int32_t token, const TokenPick& pick);
  virtual int32_t take_pick();
  // Where the model runs (its backend's device).
  virtual Device device() const { return Device::CPU; }
  // Memory free for sequence states where they live (host RAM on the CPU, device memory on a
  // GPU); 0 when unknown.
  virtual size_t memory_available() const { return 0; }
  // Tokens per prefill forward when the caller leaves it to the model (a prefill_chunk of 0):
  // 512 on the CPU, 2048 on a GPU, where cuBLAS needs the larger products to reach its peak
  // (docs/design-notes.md). load_model sets it from the backend.
  int64_t default_prefill_chunk() const { return default_prefill_chunk_; }
  void set_default_prefill_chunk(int64_t n) { default_prefill_chunk_ = n; }

 private:
  std::vector<float> pick_logits_;    // the default forward_pick's host row
  std::deque<int32_t> queued_picks_;  // the default queue_pick's tokens, not yet taken
  int32_t last_queued_pick_ = -1;
  int64_t default_prefill_chunk_ = 512;
};

// The steps a decode loop has queued (Model::queue_pick) and not taken: on leaving the scope,
// by an exception too, their picks are taken and dropped, so none is left for the next caller
// to take as its own.
struct QueuedPicks {
  explicit QueuedPicks(Model& m) : model(m) {}
  QueuedPicks(const QueuedPicks&) = delete;
  QueuedPicks& operator=(const QueuedPicks&) = delete;
  ~QueuedPicks() {
    for (; n > 0; --n) try {
        model.take_pick();
      } catch (...) {  // a failed step: nothing left to take
      }
  }
  Model& model;
  int n = 0;
};

struct LoadOptions {
  std::string device = "cpu";
  // CPU: read weights in place from the mapped file (fast load). false copies them into
  // huge-page memory: slower load, faster decode (llama.cpp's --no-mmap).
  bool mmap = true;
  // Qwen3.5 family: prefill through the Gated DeltaNet recurrence, token by token, instead of the
  // chunked delta rule. The two agree to rounding; tests and `hearth bench` compare them.
  bool gdn_recurrent_prefill = false;
  // Batch-invariant kernels: a sequence's results are bit-identical whatever else runs in the
  // same step and however its prompt is chunked (CPU only; docs/design-notes.md).
  bool deterministic = false;
  // Tensor parallelism: the model split over this many ranks (Megatron-style), each a thread with
  // its own CPU backend and an equal share of the process's threads (CPU and the llama and
  // Qwen3.5 families only for now; docs/design-notes.md). 1: one whole model.
  int tensor_parallel = 1;
  // Called as the weights load, with bytes done and the checkpoint's total (the CLI's progress
  // line); on the loading thread.
  std::function<void(size_t done_bytes, size_t total_bytes)> progress;
};

// Loads config.json + safetensors from dir; throws hearth::Error naming what is wrong.
std::unique_ptr<Model> load_model(const std::filesystem::path& dir,
                                  const LoadOptions& options = {});
// The same on a given backend (options.device is not used): e.g. a decorator that watches the
// ops of a CPU backend (calibration).
std::unique_ptr<Model> load_model(const std::filesystem::path& dir,
                                  std::unique_ptr<Backend> backend, const LoadOptions& options);

// model_types load_model accepts, sorted.
std::vector<std::string> supported_model_types();

}  // namespace hearth
