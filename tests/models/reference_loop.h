// The decode loop on one sequence, straight over the Model interface: chunked prefill, then
// sample/decode until a stop token, max_tokens, or the callback says stop; picking ahead where
// the model does (Model::queue_pick). The engine (runtime/engine.h) is the product's loop; this
// one is the model tests' reference for the model-level contracts (greedy tokens, picking
// ahead, states left consistent).
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"

namespace hearth::test {

struct GenerateParams {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  int64_t prefill_chunk = 0;  // tokens per prefill forward (bounds scratch memory); 0: the model's
                              // default (Model::default_prefill_chunk)
};

struct GenerateTimings {
  int64_t prompt_tokens = 0;
  double prompt_ms = 0.0;  // prefill up to the first sampled token
  int64_t generated_tokens = 0;
  double generate_ms = 0.0;  // after the first token
  double prompt_tokens_per_s() const { return prompt_ms > 0 ? prompt_tokens * 1e3 / prompt_ms : 0; }
  double generate_tokens_per_s() const {
    return generate_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1e3 / generate_ms : 0;
  }
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop" (EOS / stop token), "length", or "cancelled"
  GenerateTimings timings;
};

// Called with each new token; return false to stop (finish_reason "cancelled").
using TokenCallback = std::function<bool(int32_t token)>;

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

// Generates after `prompt` (which must be non-empty) on a state whose n_past() is 0 or a prefix
// of the prompt already processed (the prompt cache). Afterwards the state holds the prompt and
// every generated token but the last; where the model picks ahead (Model::picks_ahead) and the
// loop ended on a stop token or the callback, a state that cannot be cut back (recurrent
// layers) holds the last token too.
inline GenerateResult generate(Model& model, SequenceState& state, std::span<const int32_t> prompt,
                               const GenerateParams& params, const TokenCallback& on_token = {}) {
  if (prompt.empty()) fail("the prompt is empty: at least one token is needed");
  if (params.max_tokens < 0) fail("max_tokens must be >= 0, got {}", params.max_tokens);
  const int64_t n_vocab = model.info().n_vocab;
  for (int32_t t : prompt)
    if (t < 0 || t >= n_vocab) fail("prompt token id {} is out of range [0, {})", t, n_vocab);
  if (state.n_past() >= int64_t(prompt.size()) && !state.truncate(int64_t(prompt.size()) - 1))
    fail("cannot reuse the cached state for this prompt");
  Sampler sampler(params.sampling, n_vocab);
  std::vector<int32_t> stop = params.stop_token_ids;
  if (!params.ignore_eos)
    for (int64_t id : model.info().eos_token_ids) stop.push_back(int32_t(id));

  GenerateResult result;
  result.timings.prompt_tokens = int64_t(prompt.size()) - state.n_past();
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  // Without penalties or logit bias the backend picks the token where the logits are (on a GPU
  // only the id comes back); otherwise the logits come to the host for the full sampler.
  const bool backend_picks = sampler.backend_can_pick();
  std::vector<float> logits;
  if (!backend_picks) logits.resize(size_t(n_vocab));
  auto next_token = [&](std::span<const int32_t> tokens) {
    if (backend_picks) return model.forward_pick(state, tokens, sampler.next_pick());
    model.forward(state, tokens, LogitsRows::Last, logits.data());
    return sampler.sample(logits, history);
  };
  auto t0 = std::chrono::steady_clock::now();
  // Prefill in chunks; the last chunk's forward also yields the first token.
  const auto rest = prompt.subspan(size_t(state.n_past()));
  const int64_t chunk =
      params.prefill_chunk > 0 ? params.prefill_chunk : model.default_prefill_chunk();
  const int64_t last_begin =
      params.max_tokens > 0 ? (int64_t(rest.size()) - 1) / chunk * chunk : int64_t(rest.size());
  prefill(model, state, rest.first(size_t(last_begin)), chunk, nullptr);
  result.finish_reason = "length";
  auto t_first = t0;
  // Picking ahead (a GPU backend): step i + 1 is queued before step i's token reaches the host,
  // with that token as its input where it lies, so the host's work for a step overlaps the
  // device's previous one. The pick settings and random draws go to the steps in the same order.
  const bool ahead = backend_picks && model.picks_ahead();
  QueuedPicks queued(model);
  auto decode_token = [&](int64_t i) {
    if (!ahead) return next_token(std::span<const int32_t>(&history.back(), 1));
    if (queued.n == 0) {
      model.queue_pick(state, history.back(), sampler.next_pick());
      ++queued.n;
    }
    if (i + 1 < params.max_tokens) {
      model.queue_pick(state, Model::kPickedToken, sampler.next_pick());
      ++queued.n;
    }
    --queued.n;
    return model.take_pick();
  };
  for (int64_t i = 0; i < params.max_tokens; ++i) {
    const int32_t token = i == 0 ? next_token(rest.subspan(size_t(last_begin))) : decode_token(i);
    if (i == 0) {
      result.timings.prompt_ms = elapsed_ms(t0);
      t_first = std::chrono::steady_clock::now();
    }
    history.push_back(token);
    result.tokens.push_back(token);
    if (std::find(stop.begin(), stop.end(), token) != stop.end()) {
      result.finish_reason = "stop";
      break;
    }
    if (on_token && !on_token(token)) {
      result.finish_reason = "cancelled";
      break;
    }
  }
  if (queued.n > 0) {
    // The step after the last token ran on a token the loop then stopped at: its pick is
    // dropped, and the state cut back to before its input where it can be (a recurrent state
    // cannot: it keeps that last token as input).
    model.take_pick();
    --queued.n;
    state.truncate(state.n_past() - 1);
  }
  result.timings.generated_tokens = int64_t(result.tokens.size());
  if (!result.tokens.empty()) result.timings.generate_ms = elapsed_ms(t_first);
  return result;
}

}  // namespace hearth::test
