// The CUDA backend's entry points. This header has no CUDA includes, so any file can use it;
// it is compiled only when the build has HEARTH_HAVE_CUDA (see CMakeLists.txt).
#pragma once
#include <memory>

#include "backend/backend.h"

namespace hearth {

// Number of CUDA devices the driver reports; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();
// A backend on GPU `device`: bf16 activations and KV, f32 accumulation, f32 logits.
// Throws hearth::Error when the device does not exist or cannot be initialised.
std::unique_ptr<Backend> make_cuda_backend(int device);

// How many one-token gated_delta_mixer calls took the one-kernel path so far, over every CUDA
// backend of the process (a test hook: the op's tests check that the fused path really ran).
int64_t cuda_gdn_mixer_fused();

}  // namespace hearth
