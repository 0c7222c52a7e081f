// The CPU block coder and the device choice for the trellis quantizer (trellis_coder.h).
#include "quant/trellis_coder.h"

#include <algorithm>

#include "backend/device_name.h"
#include "core/error.h"
#include "quant/trellis.h"
#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/trellis_coder_cuda.h"
#endif

namespace hearth::quant {

namespace {

class CpuTrellisCoder final : public TrellisBlockCoder {
 public:
  explicit CpuTrellisCoder(ThreadPool* pool) : pool_(pool) {}
  std::string device() const override { return "cpu"; }

  void encode(const float* x, int64_t n, int k, uint32_t* words) override {
    trellis_check_bits(k, "TrellisBlockCoder::encode");
    const int block_words = TrellisSpec::block_words(k);
    auto body = [&](int64_t begin, int64_t end) {
      TrellisEncoder encoder(k);  // ~0.3 MB of scratch, reused over the chunk's blocks
      for (int64_t b = begin; b < end; ++b)
        encoder.encode_block(x + b * TrellisSpec::kBlock, words + b * block_words);
    };
    const int threads = pool_ ? pool_->size() : 1;
    if (threads <= 1 || n <= 1) return body(0, n);
    // A block costs ~1 ms: chunks of up to 4 make the encoder setup negligible while a small
    // batch (LDLQ's axis-0 rows have only a few blocks) still spreads over every thread.
    const int64_t grain = std::clamp<int64_t>(n / (2 * int64_t(threads)), 1, 4);
    pool_->parallel_for(n, grain, body);
  }

 private:
  ThreadPool* pool_;
};

}  // namespace

std::unique_ptr<TrellisBlockCoder> make_cpu_trellis_coder(ThreadPool* pool) {
  return std::make_unique<CpuTrellisCoder>(pool);
}

std::unique_ptr<TrellisBlockCoder> make_trellis_coder(std::string_view device, ThreadPool* pool) {
  const DeviceName d = parse_device_name(device);
  if (d.kind == DeviceName::Kind::Cpu) return make_cpu_trellis_coder(pool);
#ifdef HEARTH_HAVE_CUDA
  if (d.kind == DeviceName::Kind::Auto)
    return cuda_device_count() > 0 ? cuda::make_trellis_coder(0) : make_cpu_trellis_coder(pool);
  return cuda::make_trellis_coder(d.index);
#else
  if (d.kind == DeviceName::Kind::Auto) return make_cpu_trellis_coder(pool);
  fail("device '{}' is not available: this build of hearth has no CUDA backend", device);
#endif
}

}  // namespace hearth::quant
