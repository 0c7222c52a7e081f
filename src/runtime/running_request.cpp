#include "runtime/running_request.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "tokenizer/tokenizer.h"

namespace hearth {

namespace {

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

RunningRequest::RunningRequest(const Context& context, uint64_t id, GenerationRequest request,
                               GenerationCallbacks callbacks, double submitted_at_ms,
                               double started_at_ms)
    : ctx_(context),
      id_(id),
      request_(std::move(request)),
      callbacks_(std::move(callbacks)),
      submitted_at_ms_(submitted_at_ms),
      started_at_ms_(started_at_ms),
      history_(request_.prompt),
      sampler_(request_.sampling, context.model.info().n_vocab),
      stops_(request_.stop),
      logits_(size_t(context.model.info().n_vocab)) {
  result_.timings.queue_ms = started_at_ms - submitted_at_ms;
  result_.usage.prompt_tokens = n_prompt();
  prefill_target_ = n_prompt();
  take_state();
  result_.usage.cached_tokens = prompt_pos_;
  stop_ids_ = request_.stop_token_ids;
  if (!request_.ignore_eos)
    for (int64_t id : ctx_.model.info().eos_token_ids) stop_ids_.push_back(int32_t(id));
  if (ctx_.tokenizer) decoder_.emplace(*ctx_.tokenizer, request_.skip_special_tokens);
  // Logprobs, penalties and logit bias need the logits on the host. On the CPU they are there
  // anyway, and the host picks.
  backend_pick_ =
      ctx_.model.device() != Device::CPU && sampler_.backend_can_pick() && request_.logprobs < 0;
  ahead_ = backend_pick_ && ctx_.model.picks_ahead();
  result_.finish_reason = "length";
}

void RunningRequest::take_state() {
  // Prompt cache: reuse the longest common prefix; a prompt's last token always runs (its
  // logits give the first token), a recomputation needs none of its tokens' logits.
  const std::span<const int32_t> tokens(history_.data(), size_t(prefill_target_));
  if (ctx_.cache) {
    auto hit = ctx_.cache->acquire(tokens, prefill_target_ - (result_.tokens.empty() ? 1 : 0));
    state_ = std::move(hit.state);
    checkpoints_ = std::move(hit.checkpoints);
  }
  if (!state_) state_ = ctx_.model.new_sequence();
  prompt_pos_ = state_->n_past();
}

void RunningRequest::preempt() {
  state_.reset();
  checkpoints_.clear();
  planned_.clear();
  // The last generated token is the next step's input: it is not recomputed.
  prefill_target_ = result_.tokens.empty() ? n_prompt() : int64_t(history_.size()) - 1;
  prompt_pos_ = 0;
}

void RunningRequest::resume() { take_state(); }

std::span<const int32_t> RunningRequest::prompt_chunk(int64_t max) const {
  const int64_t end = std::min(prefill_target_, prompt_pos_ + std::max<int64_t>(max, 1));
  return std::span<const int32_t>(history_).subspan(size_t(prompt_pos_), size_t(end - prompt_pos_));
}

void RunningRequest::plan_checkpoints(int64_t n) {
  planned_.clear();
  if (!state_->needs_checkpoints()) return;
  const int64_t interval = std::max<int64_t>(ctx_.checkpoint_interval, 1);
  for (int64_t p = (prompt_pos_ / interval + 1) * interval; p < prompt_pos_ + n; p += interval)
    planned_.push_back(p);
  state_->keep_checkpoints_within(planned_);
}

void RunningRequest::prompt_chunk_ran(int64_t n, std::span<float> logits,
                                      std::optional<int32_t> picked) {
  // The checkpoints the chunk kept inside it (plan_checkpoints), then the one at its end.
  for (int64_t p : planned_)
    if (p < prompt_pos_ + n) checkpoints_.push_back(p);
  planned_.clear();
  prompt_pos_ += n;
  const bool last = prompt_pos_ == prefill_target_;
  if (callbacks_.on_prefill && result_.tokens.empty())
    callbacks_.on_prefill(prompt_pos_, prefill_target_);
  const int64_t interval = std::max<int64_t>(ctx_.checkpoint_interval, 1);
  if ((state_->needs_checkpoints() && prompt_pos_ % interval == 0) || last) {
    state_->keep_checkpoint();
    checkpoints_.push_back(prompt_pos_);
  }
  if (!last || !result_.tokens.empty()) return;  // a recomputation goes on decoding
  publish_prompt();
  if (request_.max_tokens == 0) return finish("length");
  token_ran(logits, picked);
}

std::optional<int32_t> RunningRequest::decode_input() {
  if (state_->n_past() >= ctx_.n_ctx) {
    finish("length");
    return std::nullopt;
  }
  return history_.back();
}

void RunningRequest::token_ran(std::span<float> logits, std::optional<int32_t> picked) {
  if (picked) return accept(*picked, std::nullopt);
  if (request_.logprobs >= 0) {
    raw_logits_.assign(logits.begin(), logits.end());  // sample() edits the logits
    const int32_t token = sampler_.sample(logits, history_);
    return accept(token, compute_logprobs(raw_logits_, token, request_.logprobs));
  }
  accept(sampler_.sample(logits, history_), std::nullopt);
}

void RunningRequest::decode_ahead(bool queue_more) {
  Model& m = ctx_.model;
  if (queued_picks_ == 0) {
    if (state_->n_past() >= ctx_.n_ctx) return finish("length");
    m.queue_pick(*state_, history_.back(), sampler_.next_pick());
    ++queued_picks_;
  }
  const int64_t next = int64_t(result_.tokens.size()) + 1;  // the index the queued step gives
  if (queue_more && next < request_.max_tokens && state_->n_past() < ctx_.n_ctx) {
    m.queue_pick(*state_, Model::kPickedToken, sampler_.next_pick());
    ++queued_picks_;
  }
  --queued_picks_;
  accept(m.take_pick(), std::nullopt);
}

void RunningRequest::drain_picks() {
  while (queued_picks_ > 0 && !done_) {
    --queued_picks_;
    accept(ctx_.model.take_pick(), std::nullopt);
  }
}

void RunningRequest::accept(int32_t token, std::optional<TokenLogprob> lp) {
  if (result_.tokens.empty()) {
    first_token_ms_ = now_ms();
    result_.timings.prefill_ms = first_token_ms_ - started_at_ms_;
    result_.timings.ttft_ms = first_token_ms_ - submitted_at_ms_;
  }
  history_.push_back(token);
  result_.tokens.push_back(token);
  pending_.tokens.push_back(token);
  if (lp) pending_.logprobs.push_back(*lp), result_.logprobs.push_back(std::move(*lp));
  if (std::find(stop_ids_.begin(), stop_ids_.end(), token) != stop_ids_.end()) {
    result_.stop_token = token;
    return finish("stop");
  }
  if (decoder_) {
    std::string safe = stops_.push(decoder_->push(token));
    if (stops_.matched()) {
      emit(std::move(safe), true);
      result_.stop_string = stops_.matched_stop();
      return finish("stop");
    }
    emit(std::move(safe), false);
  } else {
    emit(std::string(), true);
  }
  if (int64_t(result_.tokens.size()) >= request_.max_tokens) finish("length");
}

void RunningRequest::emit(std::string text, bool force) {
  if (text.empty() && !force) return;
  if (text.empty() && pending_.tokens.empty()) return;
  pending_.text = std::move(text);
  result_.text += pending_.text;
  if (callbacks_.on_delta) callbacks_.on_delta(pending_);
  pending_ = GenerationDelta{};
}

void RunningRequest::finish(const std::string& reason, const std::string& error) {
  if (done_) return;
  done_ = true;
  result_.finish_reason = reason;
  result_.error = error;
  if (queued_picks_ > 0) {
    // The step queued after the last token ran on a token the request then stopped at (or was
    // cancelled after): its pick is dropped and the state cut back to before its input where it
    // can be; a recurrent state keeps it (give_back_state caches it only if history holds it).
    for (; queued_picks_ > 0; --queued_picks_) try {
        ctx_.model.take_pick();
      } catch (...) {  // a failed step: nothing left to take
      }
    state_->truncate(state_->n_past() - 1);
  }
  if (reason != "error") {
    // The text held back for a possible stop string or an incomplete character.
    if (decoder_ && !stops_.matched()) {
      std::string tail = stops_.push(decoder_->flush());
      if (stops_.matched()) {
        result_.finish_reason = "stop";
        result_.stop_string = stops_.matched_stop();
      } else {
        tail += stops_.flush();
      }
      emit(std::move(tail), !pending_.tokens.empty());
    } else if (!pending_.tokens.empty()) {
      emit(std::string(), true);
    }
    give_back_state();
  }
  state_.reset();
  result_.usage.completion_tokens = int64_t(result_.tokens.size());
  result_.timings.decode_tokens = int64_t(result_.tokens.size());
  if (first_token_ms_ > 0) result_.timings.decode_ms = now_ms() - first_token_ms_;
  if (callbacks_.on_done) callbacks_.on_done(result_);
}

void RunningRequest::publish_prompt() {
  // A shared copy of the prompt's state goes into the cache now, not when the request ends, so
  // requests arriving meanwhile with the same prefix reuse it (where states can be shared).
  if (!ctx_.cache || state_->n_past() != prefill_target_) return;
  std::unique_ptr<SequenceState> shared = state_->share();
  if (!shared) return;
  ctx_.cache->release(std::vector<int32_t>(history_.begin(), history_.begin() + prefill_target_),
                      std::move(shared), checkpoints_);
}

void RunningRequest::give_back_state() {
  if (!ctx_.cache || !state_) return;
  // A state past the history (a step picked ahead on a token that was then not kept, and a
  // recurrent state that cannot be cut back) matches no token list: not cached.
  if (state_->n_past() > int64_t(history_.size())) return;
  const int64_t n = state_->n_past();
  if (n <= 0) return;
  ctx_.cache->release(std::vector<int32_t>(history_.begin(), history_.begin() + n),
                      std::move(state_), std::move(checkpoints_));
}

}  // namespace hearth
