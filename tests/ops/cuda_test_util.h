// Shared by the CUDA op tests (cuda_ops_test.cpp, cuda_fused_test.cpp): bf16-representable
// random inputs, the error measure, and a fixture holding one GPU backend for the suite and a
// CPU backend per test, with tensors mirrored on both. Only built with HEARTH_HAVE_CUDA.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/dtype.h"

namespace hearth::test {

inline constexpr double kBf16Tol = 1e-2, kF32Tol = 2e-3;

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16(dist(rng)));  // exactly representable in bf16
  return v;
}

// max_i |got_i - want_i| / (|want_i| + rms(want)): relative where values are large, against the
// tensor's scale where they are small (so a lone element or a near-zero one is still judged
// fairly). One bf16 rounding of the output alone is up to 2^-9 relative.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double ss = 0, worst = 0;
  for (float w : want) ss += double(w) * w;
  const double rms = std::max(std::sqrt(ss / double(want.size())), 1e-6);
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = std::isnan(got[i]) ? INFINITY : std::fabs(double(got[i]) - double(want[i]));
    worst = std::max(worst, e / (std::fabs(double(want[i])) + rms));
  }
  return worst;
}

class CudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() > 0) gpu_ = make_cuda_backend(0).release();
  }
  static void TearDownTestSuite() {
    delete gpu_;
    gpu_ = nullptr;
  }
  void SetUp() override {
    if (!gpu_) GTEST_SKIP() << "no CUDA device";
    cpu_ = make_cpu_backend();
  }

  // A tensor on each backend holding the same values (GPU in `dtype`, CPU in f32).
  struct Pair {
    DeviceBuffer gbuf;
    std::vector<float> host;
    Tensor g, c;
  };
  Pair make(std::initializer_list<int64_t> dims, const std::vector<float>& values,
            DType dtype = DType::BF16) {
    Pair p;
    p.host = values;
    size_t n = 1;
    for (auto d : dims) n *= size_t(d);
    EXPECT_EQ(n, values.size());
    p.gbuf = gpu_->alloc(n * dtype_size(dtype));
    p.g = Tensor(p.gbuf.data(), dtype, dims, Device::CUDA);
    p.c = Tensor(p.host.data(), DType::F32, dims);
    upload(p.g, values);
    return p;
  }
  // An output pair, poisoned (NaN) on both sides.
  Pair out(std::initializer_list<int64_t> dims, DType dtype = DType::BF16) {
    size_t n = 1;
    for (auto d : dims) n *= size_t(d);
    return make(dims, std::vector<float>(n, NAN), dtype);
  }
  void upload(const Tensor& g, const std::vector<float>& v) {
    if (g.dtype == DType::F32) {
      gpu_->copy_from_host(g, v.data());
    } else if (g.dtype == DType::F16) {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_f16(v[i]);
      gpu_->copy_from_host(g, b.data());
    } else {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
      gpu_->copy_from_host(g, b.data());
    }
  }
  std::vector<float> down(const Tensor& g) {
    std::vector<float> v(size_t(g.numel()));
    gpu_->to_host_f32(v.data(), g);
    return v;
  }
  void expect_close(const Pair& p, double tol, const std::string& what) {
    EXPECT_LT(rel_err(down(p.g), p.host), tol) << what;
  }

  static inline Backend* gpu_ = nullptr;
  std::unique_ptr<Backend> cpu_;
};

}  // namespace hearth::test
