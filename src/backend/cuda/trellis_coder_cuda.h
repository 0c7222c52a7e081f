// The trellis quantizer's block coder on a GPU (quant/trellis_coder.h): one thread block per
// 256-weight block runs the same two-pass tail-biting Viterbi search as TrellisEncoder, with
// the path costs and the packed backpointers in shared memory.
#pragma once
#include <memory>

#include "quant/trellis_coder.h"

namespace hearth::cuda {

// Throws hearth::Error when GPU `device` does not exist or cannot be initialised.
std::unique_ptr<quant::TrellisBlockCoder> make_trellis_coder(int device);

}  // namespace hearth::cuda
