// The trellis quantizer's GPU block coder (src/backend/cuda/trellis_viterbi.cu) against the CPU's
// TrellisEncoder: the same tail-biting Viterbi search, so on Gaussian blocks the codes agree
// except where two paths tie to f32 rounding, the total error is the same, and the MSE is
// QTIP's. Batch edges (one block, a batch of 2^16 and a few more) and every k. Skipped
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "quant/trellis.h"
#include "quant/trellis_coder.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/trellis_coder_cuda.h"

namespace hearth {
namespace {

using quant::TrellisSpec;
constexpr int64_t kT = TrellisSpec::kBlock;

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

// Σ (x − decoded)² of block b.
double block_error(const float* x, const uint32_t* words, int k) {
  float decoded[kT];
  quant::trellis_decode_block(words, k, decoded);
  double e = 0;
  for (int t = 0; t < kT; ++t) e += (double(x[t]) - decoded[t]) * (double(x[t]) - decoded[t]);
  return e;
}

class CudaTrellisCoder : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    gpu_ = cuda::make_trellis_coder(0);
  }
  std::unique_ptr<quant::TrellisBlockCoder> gpu_;
};

TEST_F(CudaTrellisCoder, MatchesTheCpuEncoder) {
  constexpr int64_t kBlocks = 97;
  const std::vector<float> x = gaussian(kBlocks * kT, 11);
  auto cpu = quant::make_cpu_trellis_coder(nullptr);
  for (int k = TrellisSpec::kMinBits; k <= TrellisSpec::kMaxBits; ++k) {
    const int words = TrellisSpec::block_words(k);
    std::vector<uint32_t> want(size_t(kBlocks * words)), got(want.size(), 0xdeadbeefu);
    cpu->encode(x.data(), kBlocks, k, want.data());
    gpu_->encode(x.data(), kBlocks, k, got.data());
    int same = 0;
    double err_cpu = 0, err_gpu = 0;
    for (int64_t b = 0; b < kBlocks; ++b) {
      const uint32_t* w = &want[size_t(b * words)];
      const uint32_t* g = &got[size_t(b * words)];
      same += std::equal(w, w + words, g);
      const double ec = block_error(&x[size_t(b * kT)], w, k);
      const double eg = block_error(&x[size_t(b * kT)], g, k);
      // A tie broken the other way may cost a rounding's worth, never a worse path.
      EXPECT_LE(eg, ec * (1 + 1e-5) + 1e-9) << "k " << k << " block " << b;
      err_cpu += ec;
      err_gpu += eg;
    }
    EXPECT_GE(same, kBlocks * 9 / 10) << "k " << k;
    EXPECT_NEAR(err_gpu, err_cpu, 1e-5 * err_cpu) << "k " << k;
  }
}

TEST_F(CudaTrellisCoder, GaussianMseIsQtips) {
  constexpr int64_t kBlocks = 4096;  // 1 M weights
  const std::vector<float> x = gaussian(kBlocks * kT, 12);
  const double qtip[] = {0.0733, 0.0198, 0.0055};  // tail-biting L = 12, k = 2, 3, 4
  // At most 1 % above QTIP's figure, 2.5 % at k = 2, where 1MAD's lighter tails cost ~1.9 %
  // with any encoder (docs/QUANTIZATION.md); below it only by a sample's luck (-1.3 % at k = 4
  // on these samples), never by much: a coder that loses or garbles paths lands far above.
  const double above[] = {0.025, 0.01, 0.01};
  for (int k = TrellisSpec::kMinBits; k <= TrellisSpec::kMaxBits; ++k) {
    const int words = TrellisSpec::block_words(k);
    std::vector<uint32_t> codes(size_t(kBlocks * words));
    gpu_->encode(x.data(), kBlocks, k, codes.data());
    double err = 0;
    for (int64_t b = 0; b < kBlocks; ++b)
      err += block_error(&x[size_t(b * kT)], &codes[size_t(b * words)], k);
    const double mse = err / double(kBlocks * kT);
    EXPECT_LE(mse, qtip[k - 2] * (1 + above[k - 2])) << "k " << k;
    EXPECT_GE(mse, qtip[k - 2] * 0.97) << "k " << k;
  }
}

// More blocks than one launch takes (2^16): the blocks on either side of the batch edge, and a
// single block, come out as the CPU codes them.
TEST_F(CudaTrellisCoder, BatchEdgesAndSingleBlocks) {
  constexpr int64_t kBlocks = (int64_t(1) << 16) + 5;
  const std::vector<float> x = gaussian(kBlocks * kT, 13);
  const int k = 3, words = TrellisSpec::block_words(k);
  std::vector<uint32_t> got(size_t(kBlocks * words));
  gpu_->encode(x.data(), kBlocks, k, got.data());
  quant::TrellisEncoder encoder(k);
  double err_cpu = 0, err_gpu = 0;
  for (int64_t b :
       {int64_t(0), int64_t(1), (int64_t(1) << 16) - 1, int64_t(1) << 16, kBlocks - 1}) {
    std::vector<uint32_t> want(static_cast<size_t>(words));
    err_cpu += encoder.encode_block(&x[size_t(b * kT)], want.data());
    err_gpu += block_error(&x[size_t(b * kT)], &got[size_t(b * words)], k);
  }
  EXPECT_NEAR(err_gpu, err_cpu, 1e-5 * err_cpu);
  std::vector<uint32_t> one(static_cast<size_t>(words));
  gpu_->encode(&x[size_t((kBlocks - 1) * kT)], 1, k, one.data());
  EXPECT_TRUE(std::equal(one.begin(), one.end(), &got[size_t((kBlocks - 1) * words)]));
}

// The row quantizer with the GPU coder: the same scales, and the same error as the CPU's.
TEST_F(CudaTrellisCoder, RowQuantizerOnTheGpu) {
  constexpr int64_t kRows = 48, kCols = 1280;
  std::vector<float> w = gaussian(kRows * kCols, 14);
  for (int64_t c = 0; c < kCols; ++c) w[size_t(7 * kCols + c)] = 0.0f;  // a zero row
  const int k = 4;
  std::vector<uint32_t> cpu_codes(size_t(kRows * TrellisSpec::row_words(kCols, k)));
  std::vector<uint32_t> gpu_codes(cpu_codes.size());
  std::vector<uint16_t> cpu_scales(kRows), gpu_scales(kRows);
  quant::quantize_trellis_rows(w.data(), kRows, kCols, k, cpu_codes.data(), cpu_scales.data(),
                               nullptr);
  quant::quantize_trellis_rows(w.data(), kRows, kCols, k, gpu_codes.data(), gpu_scales.data(),
                               nullptr, gpu_.get());
  EXPECT_EQ(gpu_scales, cpu_scales);
  std::vector<float> a(w.size()), b(w.size());
  quant::dequantize_trellis_rows(cpu_codes.data(), cpu_scales.data(), kRows, kCols, k, a.data());
  quant::dequantize_trellis_rows(gpu_codes.data(), gpu_scales.data(), kRows, kCols, k, b.data());
  double ea = 0, eb = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    ea += (a[i] - w[i]) * (a[i] - w[i]);
    eb += (b[i] - w[i]) * (b[i] - w[i]);
  }
  EXPECT_NEAR(eb, ea, 1e-5 * ea);
  for (int64_t c = 0; c < kCols; ++c) EXPECT_EQ(b[size_t(7 * kCols + c)], 0.0f);
}

}  // namespace
}  // namespace hearth

#endif  // HEARTH_HAVE_CUDA
