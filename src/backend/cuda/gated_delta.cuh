// Shared by the two Gated DeltaNet files: gated_delta.cu (conv, gates, recurrent form) and
// gated_delta_chunked.cu (chunked prefill form).
#pragma once
#include "backend/cuda/device_util.cuh"

namespace hearth::cuda {

// Decode-sized calls let the next kernel start early (programmatic dependent launch). A prefill
// call runs long, and the next kernel's thousands of blocks waiting beside it slowed the 9B
// hybrid's pp512 from 9.1k to 5.9k t/s on the H200: there the next kernel starts at the end.
constexpr int64_t kDecodeTokens = 8;

// State columns per block: both forms give a block one value head's 32-column slab of the state.
constexpr int kCols = 32;

// Sets the chunked kernel's shared-memory limit to optin (the device's per-block maximum).
void gated_delta_chunked_init(int optin);

// The chunked form for a prefill call (more than kDecodeTokens tokens, p.chunked set); false
// where it does not apply (Dk not a multiple of 16 or above 256, or its panels do not fit the
// device): the caller runs the recurrent form then.
bool gated_delta_chunked(Ctx& ctx, const Ten& out, const Ten& qkv, const Ten& g, const Ten& beta,
                         const Ten& state, const GatedDeltaParams& p);

}  // namespace hearth::cuda
