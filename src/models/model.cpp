#include "models/model.h"

#include "backend/token_pick.h"
#include "core/error.h"

namespace hearth {

int32_t Model::forward_pick(SequenceState& state, std::span<const int32_t> tokens,
                            const TokenPick& pick) {
  pick_logits_.resize(size_t(info().n_vocab));
  forward(state, tokens, LogitsRows::Last, pick_logits_.data());
  thread_local std::vector<std::pair<float, int32_t>> scratch;
  return pick_token_host(pick_logits_, pick, scratch);
}

void Model::check_batch(std::span<const BatchItem> items) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].state) fail("forward_batch: item {} has no sequence", i);
    if (items[i].tokens.empty()) fail("forward_batch: item {} has no tokens", i);
    if (items[i].pick && (items[i].logits || !items[i].token))
      fail("forward_batch: item {} asks for a pick without a token or with logits too", i);
    for (size_t j = 0; j < i; ++j)
      if (items[i].state == items[j].state) fail("forward_batch: sequence {} appears twice", j);
  }
}

void Model::forward_batch(std::span<const BatchItem> items) {
  check_batch(items);
  for (const BatchItem& item : items) {
    if (item.pick)
      *item.token = forward_pick(*item.state, item.tokens, *item.pick);
    else
      forward(*item.state, item.tokens, item.logits ? LogitsRows::Last : LogitsRows::None,
              item.logits);
  }
}

void Model::queue_pick(SequenceState& state, int32_t token, const TokenPick& pick) {
  if (token == kPickedToken) {
    if (last_queued_pick_ < 0) fail("queue_pick: no earlier step picked a token to continue from");
    token = last_queued_pick_;
  }
  last_queued_pick_ = forward_pick(state, std::span<const int32_t>(&token, 1), pick);
  queued_picks_.push_back(last_queued_pick_);
}

int32_t Model::take_pick() {
  if (queued_picks_.empty()) fail("take_pick: no step is queued");
  const int32_t token = queued_picks_.front();
  queued_picks_.pop_front();
  return token;
}

}  // namespace hearth
