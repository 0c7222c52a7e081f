// The trellis quantizer's block coders (src/quant/trellis_coder.h): the CPU coder gives exactly
// TrellisEncoder's codes whatever its thread count, the device choice names what is wrong with a
// bad device, and the row quantizer hands every block to the coder it is given.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "quant/trellis.h"
#include "quant/trellis_coder.h"
#include "recording_coder.h"

namespace hearth::quant {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(TrellisBlockCoder, CpuCoderGivesTheEncodersCodesOnAnyThreadCount) {
  constexpr int64_t kBlocks = 11;  // not a multiple of the pool's chunking
  const std::vector<float> x = gaussian(size_t(kBlocks * TrellisSpec::kBlock), 3);
  ThreadPool pool(3);
  for (int k = TrellisSpec::kMinBits; k <= TrellisSpec::kMaxBits; ++k) {
    const size_t words = size_t(kBlocks * TrellisSpec::block_words(k));
    std::vector<uint32_t> want(words);
    TrellisEncoder encoder(k);
    for (int64_t b = 0; b < kBlocks; ++b)
      encoder.encode_block(&x[size_t(b * TrellisSpec::kBlock)],
                           &want[size_t(b * TrellisSpec::block_words(k))]);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      std::vector<uint32_t> got(words, 0xdeadbeefu);
      make_cpu_trellis_coder(p)->encode(x.data(), kBlocks, k, got.data());
      EXPECT_EQ(got, want) << "k " << k << (p ? " on 3 threads" : " on the calling thread");
    }
  }
}

TEST(TrellisBlockCoder, DeviceChoiceNamesBadDevices) {
  ThreadPool pool(1);
  EXPECT_EQ(make_trellis_coder("cpu", &pool)->device(), "cpu");
  EXPECT_FALSE(make_trellis_coder("auto", &pool)->device().empty());
  auto message = [&](const char* device) {
    try {
      make_trellis_coder(device, &pool);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("gpu").find("unknown device 'gpu'"), std::string::npos) << message("gpu");
  EXPECT_NE(message("cuda:x").find("expected cuda:N"), std::string::npos) << message("cuda:x");
  EXPECT_NE(message("cuda:99").find("cuda:99"), std::string::npos) << message("cuda:99");
  EXPECT_THROW(make_cpu_trellis_coder(&pool)->encode(nullptr, 1, 5, nullptr), Error);
}

using test::RecordingCoder;

TEST(TrellisBlockCoder, RowQuantizerHandsEveryBlockToItsCoder) {
  constexpr int64_t kRows = 5, kCols = 768;
  const std::vector<float> w = gaussian(size_t(kRows * kCols), 4);
  const size_t words = size_t(kRows * TrellisSpec::row_words(kCols, 3));
  std::vector<uint32_t> want(words), got(words);
  std::vector<uint16_t> want_scales(kRows), got_scales(kRows);
  quantize_trellis_rows(w.data(), kRows, kCols, 3, want.data(), want_scales.data(), nullptr);
  RecordingCoder coder;
  quantize_trellis_rows(w.data(), kRows, kCols, 3, got.data(), got_scales.data(), nullptr, &coder);
  EXPECT_EQ(coder.batches, std::vector<int64_t>{kRows * kCols / TrellisSpec::kBlock});
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_scales, want_scales);
}

}  // namespace
}  // namespace hearth::quant
