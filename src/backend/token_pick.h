// The host form of Backend::pick_token: the reference every backend's picker follows, and the
// last stage of the runtime's Sampler (after penalties and logit bias).
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace hearth {

// Modifies nothing; `scratch` is reused between calls to avoid allocations.
int32_t pick_token_host(std::span<const float> logits, const TokenPick& pick,
                        std::vector<std::pair<float, int32_t>>& scratch);

}  // namespace hearth
