// The trellis quantizer's unit of device work: many independent 256-weight blocks coded at once
// (each already divided by its row scale), on the CPU's threads or on a GPU. quantize_trellis_rows
// and block LDLQ (ldlq.h) hand every batch of blocks to one of these, so the choice of device is
// made once per run (`hearth quantize --device`) and the row scale rule, the LDLQ feedback and
// the output layout stay the same whoever codes the blocks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/thread_pool.h"

namespace hearth::quant {

class TrellisBlockCoder {
 public:
  virtual ~TrellisBlockCoder() = default;
  // "cpu", or "cuda:N": for messages and the progress line.
  virtual std::string device() const = 0;
  // x [n, 256] f32 → words [n, 8k] (trellis.h's block layout), each block by the tail-biting
  // Viterbi search of TrellisEncoder::encode_block. k is 2, 3 or 4.
  virtual void encode(const float* x, int64_t n, int k, uint32_t* words) = 0;
};

// TrellisEncoder on `pool`'s threads (nullptr: the calling thread only).
std::unique_ptr<TrellisBlockCoder> make_cpu_trellis_coder(ThreadPool* pool);

// cpu | cuda | cuda:N | auto (the first GPU when this build has CUDA and one is present, else the
// CPU on `pool`). Throws hearth::Error naming the device when it is unknown or unavailable.
std::unique_ptr<TrellisBlockCoder> make_trellis_coder(std::string_view device, ThreadPool* pool);

}  // namespace hearth::quant
