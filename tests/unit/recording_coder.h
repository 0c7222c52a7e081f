// A trellis block coder for tests: records the batch sizes it is handed and codes them on the
// CPU, so a test can check how the quantizer batches its blocks and that the result is the
// default coder's.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "quant/trellis_coder.h"

namespace hearth::quant::test {

class RecordingCoder final : public TrellisBlockCoder {
 public:
  std::string device() const override { return "recording"; }
  void encode(const float* x, int64_t n, int k, uint32_t* words) override {
    batches.push_back(n);
    cpu_->encode(x, n, k, words);
  }
  std::vector<int64_t> batches;

 private:
  std::unique_ptr<TrellisBlockCoder> cpu_ = make_cpu_trellis_coder(nullptr);
};

}  // namespace hearth::quant::test
