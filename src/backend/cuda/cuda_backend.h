// The CUDA backend's entry points. This header has no CUDA includes, so any file can use it;
// it is compiled only when the build has HEARTH_HAVE_CUDA (see CMakeLists.txt).
#pragma once
#include <cstdint>
#include <memory>

#include "backend/backend.h"

namespace hearth {

// The CUDA backend's knobs, fixed when it is made. The defaults are the measured-faster choices
// and what the product runs; the other settings exist for older GPUs, for tests that compare
// two paths on one device, and for measurements (docs/cuda.md, "Backend options").
struct CudaOptions {
  // Programmatic dependent launch between the decode kernels (sm_90 and later only): each
  // kernel's blocks become resident and fetch their weights while the previous one runs.
  bool pdl = true;
  // The one-kernel Gated DeltaNet mixer for one-token calls (sm_90 and later: it needs
  // thread-block clusters). Off, or below sm_90, the mixer runs as its four kernels.
  bool gdn_mixer = true;

  // The one-kernel decode step (decode_step.cu). Auto takes it for stacks whose layers hold
  // 24 MB of weights or more (below that it is not measured ahead of the per-op path); Always
  // for every shape it fits; Never leaves every step to the per-op path (its test oracle).
  enum class DecodeStep { Auto, Always, Never };
  DecodeStep decode_step = DecodeStep::Auto;
  // Its grid: 0 is one block per SM; N > 0 is min(N, SMs) blocks, so that a block takes several
  // heads in turn as on a GPU with fewer SMs than the model has heads (tests).
  int decode_blocks = 0;
  // Each phase's first weight rows staged into shared memory across the step's grid barriers.
  bool decode_stage = true;
  // In llama stacks, the o rows' second batch staged too (into attention's region once the
  // block's attention is done).
  bool decode_stage2 = true;
  // Attention's first chunk of cached keys and values prefetched across the barrier.
  bool decode_kv_prefetch = true;
  // A head's key chunks spread over blocks when it has more than its block's buffered warps
  // (heads of 256 past 64 keys, of 128 past 128); off: a block per head at every length (the
  // same bits; tests compare the two).
  bool decode_xattn = true;

  // --deterministic: every product through linear_fixed (one reduction order at any row count),
  // never the GEMV, cuBLASLt or the one-kernel step, so a row's results do not depend on the
  // other rows of its step.
  bool deterministic = false;
};

// Number of CUDA devices the driver reports; 0 when there is no driver or no GPU (never throws).
int cuda_device_count();
// A backend on GPU `device`: bf16 activations and KV, f32 accumulation, f32 logits.
// Throws hearth::Error when the device does not exist or cannot be initialised.
std::unique_ptr<Backend> make_cuda_backend(int device, const CudaOptions& options = {});

// How many one-token gated_delta_mixer calls took the one-kernel path so far, over every CUDA
// backend of the process (a test hook: the op's tests check that the fused path really ran).
int64_t cuda_gdn_mixer_fused();

}  // namespace hearth
