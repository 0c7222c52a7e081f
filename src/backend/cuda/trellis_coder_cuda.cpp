// The GPU block coder (trellis_coder_cuda.h): batches of blocks through device buffers and the
// Viterbi kernel of trellis_viterbi.cu, one stream, synchronous per batch.
#include "backend/cuda/trellis_coder_cuda.h"

#include <algorithm>
#include <string>

#include "backend/cuda/common.h"
#include "core/error.h"
#include "quant/trellis.h"

namespace hearth::cuda {

namespace {

using quant::TrellisSpec;

class CudaTrellisCoder final : public quant::TrellisBlockCoder {
 public:
  explicit CudaTrellisCoder(int device) : device_(device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      count = 0;
    }
    if (device < 0 || device >= count)
      fail("device 'cuda:{}' does not exist ({} CUDA device{} found)", device, count,
           count == 1 ? "" : "s");
    HEARTH_CUDA_CHECK(cudaSetDevice(device_));
    HEARTH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaTrellisCoder() override {
    cudaSetDevice(device_);
    cudaFree(x_);
    cudaFree(words_);
    cudaStreamDestroy(stream_);
  }
  CudaTrellisCoder(const CudaTrellisCoder&) = delete;
  CudaTrellisCoder& operator=(const CudaTrellisCoder&) = delete;

  std::string device() const override { return "cuda:" + std::to_string(device_); }

  void encode(const float* x, int64_t n, int k, uint32_t* words) override {
    quant::trellis_check_bits(k, "TrellisBlockCoder::encode");
    if (n <= 0) return;
    HEARTH_CUDA_CHECK(cudaSetDevice(device_));
    if (!x_) {
      HEARTH_CUDA_CHECK(
          cudaMalloc(reinterpret_cast<void**>(&x_), size_t(kBatch * kT) * sizeof(float)));
      HEARTH_CUDA_CHECK(cudaMalloc(
          reinterpret_cast<void**>(&words_),
          size_t(kBatch * TrellisSpec::block_words(TrellisSpec::kMaxBits)) * sizeof(uint32_t)));
    }
    const int block_words = TrellisSpec::block_words(k);
    for (int64_t b0 = 0; b0 < n; b0 += kBatch) {
      const int64_t count = std::min(kBatch, n - b0);
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(x_, x + b0 * kT, size_t(count * kT) * sizeof(float),
                                        cudaMemcpyHostToDevice, stream_));
      launch_trellis_viterbi(x_, count, k, words_, stream_);
      HEARTH_CUDA_CHECK(cudaMemcpyAsync(words + b0 * block_words, words_,
                                        size_t(count * block_words) * sizeof(uint32_t),
                                        cudaMemcpyDeviceToHost, stream_));
      HEARTH_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
  }

 private:
  static constexpr int64_t kT = TrellisSpec::kBlock;
  // Blocks per launch: 64 MB of input, hundreds of thread blocks for every SM.
  static constexpr int64_t kBatch = int64_t(1) << 16;

  int device_;
  cudaStream_t stream_ = nullptr;
  float* x_ = nullptr;
  uint32_t* words_ = nullptr;
};

}  // namespace

std::unique_ptr<quant::TrellisBlockCoder> make_trellis_coder(int device) {
  return std::make_unique<CudaTrellisCoder>(device);
}

}  // namespace hearth::cuda
