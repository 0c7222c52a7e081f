#include "models/model.h"

#include "backend/token_pick.h"

namespace hearth {

int32_t Model::forward_pick(SequenceState& state, std::span<const int32_t> tokens,
                            const TokenPick& pick) {
  pick_logits_.resize(size_t(info().n_vocab));
  forward(state, tokens, LogitsRows::Last, pick_logits_.data());
  thread_local std::vector<std::pair<float, int32_t>> scratch;
  return pick_token_host(pick_logits_, pick, scratch);
}

}  // namespace hearth
