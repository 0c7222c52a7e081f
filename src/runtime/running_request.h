// RunningRequest: one admitted request inside the engine's loop. It owns the request's sequence
// state (taken from the prompt cache or new), its sampler, detokenizer and stop-string filter,
// and turns each step's logits (or a token picked on the device) into streamed deltas and the
// final result. The engine decides which requests step together; this class knows nothing of
// the others. Not thread-safe: only the engine's worker touches it.
// Invariants: finish() runs exactly once and calls on_done; after it, done() is true and the
// state is back in the prompt cache (unless the request failed) or freed. A preempted request
// has no state until resume(); it then recomputes its prompt and the tokens it generated.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

// Milliseconds on the steady clock: the engine's and its requests' timestamps.
inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

class RunningRequest {
 public:
  struct Context {
    Model& model;
    const Tokenizer* tokenizer;  // null: token ids only
    PromptCache* cache;          // null: no prompt cache
    int64_t n_ctx;
    int64_t checkpoint_interval;
  };
  // Takes the prompt-cache entry sharing the longest prefix, or a new state. `started_at_ms`
  // is when the engine admitted it (the queue time ends there).
  RunningRequest(const Context& context, uint64_t id, GenerationRequest request,
                 GenerationCallbacks callbacks, double submitted_at_ms, double started_at_ms);
  RunningRequest(const RunningRequest&) = delete;
  RunningRequest& operator=(const RunningRequest&) = delete;

  uint64_t id() const { return id_; }  // the engine's, in arrival order
  bool done() const { return done_; }
  bool cancel_requested() const { return request_.cancel->load(); }
  SequenceState& state() { return *state_; }

  // Prefill: the tokens to run before decoding (the prompt; after a preemption, the prompt and
  // the tokens generated but the last), and the next chunk of at most `max` of them.
  // plan_checkpoints(n), before a chunk of n runs, asks a state that needs checkpoints to keep
  // them at the checkpoint boundaries inside it (every checkpoint_interval positions), so a later
  // prompt can resume there. prompt_chunk_ran() records that the chunk went through the model
  // (and its checkpoints, with one at its end where it ends on a boundary or the prompt); when
  // it ended the prompt of a request that has no token yet, `logits` (the last row's) give the
  // first token, or `picked` is that token where the backend picked it.
  bool prefilling() const { return prompt_pos_ < prefill_target_; }
  std::span<const int32_t> prompt() const { return request_.prompt; }
  // In its first prefill, whose end puts the prompt's state into the prompt cache.
  bool publishes_prompt() const { return prefilling() && result_.tokens.empty(); }
  int64_t prompt_left() const { return prefill_target_ - prompt_pos_; }
  // Tokens of history (prompt and generated) and tokens it may still generate (max_tokens).
  int64_t positions() const { return int64_t(history_.size()); }
  int64_t tokens_to_come() const {
    return std::max<int64_t>(0, request_.max_tokens - int64_t(result_.tokens.size()));
  }
  std::span<const int32_t> prompt_chunk(int64_t max) const;
  void plan_checkpoints(int64_t n);
  // Whether a chunk of n tokens needs its last row's logits.
  bool chunk_wants_logits(int64_t n) const { return n == prompt_left() && result_.tokens.empty(); }
  void prompt_chunk_ran(int64_t n, std::span<float> logits,
                        std::optional<int32_t> picked = std::nullopt);

  // Decode: the input of the next step (the last token), or nullopt after finishing with
  // "length" when the context is full. token_ran() takes that step's logits, or the token the
  // backend picked.
  std::optional<int32_t> decode_input();
  void token_ran(std::span<float> logits, std::optional<int32_t> picked = std::nullopt);
  // Whether the backend may pick this request's tokens where the logits are (a GPU: only the id
  // crosses to the host; no logprobs, penalties or logit bias), with next_pick()'s settings and
  // draw for each step (Model::BatchItem::pick).
  bool picks_on_backend() const { return backend_pick_; }
  TokenPick next_pick() { return sampler_.next_pick(); }
  // The host buffer for this request's logits row ([n_vocab]).
  float* logits() { return logits_.data(); }

  // Decoding alone on a backend that picks ahead (Model::picks_ahead): the sampler's pick runs
  // on the device and the next step is queued before this one's token is taken, so the host's
  // work overlaps the device's. `queue_more` false stops queueing (another request is about to
  // join); drain_picks() then takes the step still queued, leaving the request ready to step in
  // a batch.
  bool can_pick_ahead() const { return ahead_; }
  void decode_ahead(bool queue_more);
  void drain_picks();

  // Preemption (the KV budget is full): frees the state; the request keeps its tokens, sampler
  // and text, and resume() gives it a state again (from the prompt cache where it can) with
  // everything to recompute. Not while steps are queued ahead.
  void preempt();
  void resume();
  bool has_state() const { return state_ != nullptr; }

  // Ends the request: "stop", "length", "cancelled" or "error" (with `error`).
  void finish(const std::string& reason, const std::string& error = {});

 private:
  int64_t n_prompt() const { return int64_t(request_.prompt.size()); }
  // A sampled token: records, streams, and finishes the request on a stop or at max_tokens.
  void accept(int32_t token, std::optional<TokenLogprob> logprob);
  void emit(std::string text, bool force);
  // Puts a shared copy of the state at the prompt's end into the prompt cache.
  void publish_prompt();
  void give_back_state();
  // A state holding the longest cached prefix of the first prefill_target_ tokens, or a new one.
  void take_state();

  Context ctx_;
  uint64_t id_;
  GenerationRequest request_;
  GenerationCallbacks callbacks_;
  double submitted_at_ms_, started_at_ms_, first_token_ms_ = 0;
  std::unique_ptr<SequenceState> state_;
  std::vector<int64_t> checkpoints_;  // positions the state can go back to (prompt cache)
  std::vector<int64_t> planned_;      // checkpoints asked of the chunk about to run
  int64_t prompt_pos_ = 0;            // tokens of history_ the state holds
  int64_t prefill_target_ = 0;        // tokens of history_ to run before decoding
  std::vector<int32_t> history_;      // prompt + generated tokens
  Sampler sampler_;
  std::vector<int32_t> stop_ids_;
  std::optional<StreamDecoder> decoder_;
  StopStringFilter stops_;
  GenerationDelta pending_;  // tokens/logprobs waiting for their text to be released
  GenerationResult result_;
  std::vector<float> logits_;
  std::vector<float> raw_logits_;  // the step's logits before sampling edits them (logprobs)
  bool backend_pick_ = false;
  bool ahead_ = false;
  int queued_picks_ = 0;  // steps queued with Model::queue_pick and not taken
  bool done_ = false;
};

}  // namespace hearth
