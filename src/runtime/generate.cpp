#include "runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/error.h"

namespace hearth {

namespace {
double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}
}  // namespace

void prefill(Model& model, SequenceState& state, std::span<const int32_t> tokens, int64_t chunk,
             std::vector<float>* last_logits) {
  chunk = chunk > 0 ? chunk : model.default_prefill_chunk();
  const int64_t n = int64_t(tokens.size());
  if (last_logits) last_logits->resize(size_t(model.info().n_vocab));
  for (int64_t begin = 0; begin < n; begin += chunk) {
    const int64_t end = std::min(n, begin + chunk);
    const bool last = end == n && last_logits;
    model.forward(state, tokens.subspan(size_t(begin), size_t(end - begin)),
                  last ? LogitsRows::Last : LogitsRows::None, last ? last_logits->data() : nullptr);
  }
}

GenerateResult generate(Model& model, SequenceState& state, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TokenCallback& on_token) {
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

SamplingParams sampling_defaults(const ModelConfig& config) {
  SamplingParams p;
  const auto& g = config.generation();
  auto num = [&](const char* key, double fallback) {
    auto it = g.find(key);
    return it != g.end() && it->is_number() ? it->get<double>() : fallback;
  };
  const bool do_sample =
      g.contains("do_sample") && g["do_sample"].is_boolean() && g["do_sample"].get<bool>();
  p.temperature = do_sample ? float(num("temperature", 1.0)) : 0.0f;
  // Converted to int: out of range it would be undefined, not merely a bad setting.
  const double top_k = num("top_k", 50);
  if (do_sample && !(top_k >= 0.0 && top_k <= double(INT32_MAX)))
    fail("{}: field 'top_k' is {}, expected an integer in [0, {}]", config.generation_source(),
         top_k, INT32_MAX);
  p.top_k = do_sample ? int(top_k) : 0;
  p.top_p = float(num("top_p", 1.0));
  p.min_p = float(num("min_p", 0.0));
  p.repetition_penalty = float(num("repetition_penalty", 1.0));
  return p;
}

}  // namespace hearth
