// The CUDA backend with CudaOptions::deterministic: a product's rows (linear, and the residual
// form's x += product · scale) are the same bits whatever rows share the call (the same rows
// alone, in small groups and among hundreds: every tile shape of linear_fixed), and agree with
// the CPU backend within bf16 rounding; linear_fixed on Wᵀ gives W's bits. Skipped without a
// GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

#ifdef HEARTH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/common.h"
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace hearth {
namespace {

using test::kBf16Tol;
using test::randn;
using test::rel_err;

class CudaDeterministic : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    CudaOptions o;
    o.deterministic = true;
    gpu_ = make_cuda_backend(0, o);
    cpu_ = make_cpu_backend();
  }
  // A device tensor of `values` in `dtype` (bf16-representable values), kept alive here.
  Tensor device(std::initializer_list<int64_t> dims, const std::vector<float>& values,
                DType dtype) {
    DeviceBuffer& b = buffers_.emplace_back(gpu_->alloc(values.size() * dtype_size(dtype)));
    const Tensor t(b.data(), dtype, dims, Device::CUDA);
    if (dtype == DType::F32) {
      gpu_->copy_from_host(t, values.data());
    } else {
      std::vector<uint16_t> bits(values.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(values[i]);
      gpu_->copy_from_host(t, bits.data());
    }
    return t;
  }
  std::vector<float> host(const Tensor& t) {
    std::vector<float> v(size_t(t.numel()));
    gpu_->to_host_f32(v.data(), t);
    return v;
  }
  // Rows [begin, end) of `all` ([n, cols]) equal `part` bit for bit.
  static void expect_same_bits(const std::vector<float>& all, const std::vector<float>& part,
                               int64_t begin, int64_t cols, const std::string& what) {
    ASSERT_EQ(0, std::memcmp(all.data() + begin * cols, part.data(), part.size() * sizeof(float)))
        << what;
  }

  std::unique_ptr<Backend> gpu_, cpu_;
  std::vector<DeviceBuffer> buffers_;
};

TEST_F(CudaDeterministic, ProductRowsDoNotDependOnTheirNeighbours) {
  struct Case {
    int64_t out, in;
    bool bias;
    DType y;
  };
  // One k tile, a ragged k tail, outputs off every tile width, f32 outputs (logits), and K long
  // enough for the deep ring to wrap many times.
  const Case cases[] = {{8, 16, false, DType::BF16},
                        {1000, 72, true, DType::BF16},
                        {4104, 1024, false, DType::F32},
                        {300, 4096, true, DType::BF16}};
  const int64_t n = 300;
  uint32_t seed = 7;
  for (const Case& c : cases) {
    const std::string name = "out=" + std::to_string(c.out) + " in=" + std::to_string(c.in);
    const std::vector<float> xv = randn(size_t(n * c.in), seed++),
                             wv = randn(size_t(c.out * c.in), seed++, 0.05f),
                             bv = c.bias ? randn(size_t(c.out), seed++) : std::vector<float>();
    const Tensor x = device({n, c.in}, xv, DType::BF16), w = device({c.out, c.in}, wv, DType::BF16);
    const Tensor bias = c.bias ? device({c.out}, bv, DType::F32) : Tensor();
    const Tensor y = device({n, c.out}, std::vector<float>(size_t(n * c.out), 0.0f), c.y);
    gpu_->linear(y, x, w, bias);
    const std::vector<float> all = host(y);

    std::vector<float> xc = xv, wc = wv, bc = bv, yc(size_t(n * c.out));
    cpu_->linear(Tensor(yc.data(), DType::F32, {n, c.out}),
                 Tensor(xc.data(), DType::F32, {n, c.in}),
                 Tensor(wc.data(), DType::F32, {c.out, c.in}),
                 c.bias ? Tensor(bc.data(), DType::F32, {c.out}) : Tensor());
    EXPECT_LT(rel_err(all, yc), kBf16Tol) << name;

    // Each row count takes a tile shape (up to 16, 64, more) and starts at the first, a middle
    // and the last rows.
    for (int64_t rows : {1, 2, 7, 16, 17, 64, 65, 129}) {
      for (int64_t begin : {int64_t(0), (37 * rows) % (n - rows + 1), n - rows}) {
        const Tensor part = y.slice_rows(0, rows);  // overwritten: `all` holds the reference
        gpu_->linear(part, x.slice_rows(begin, begin + rows), w, bias);
        expect_same_bits(all, host(part), begin, c.out,
                         name + " rows " + std::to_string(begin) + "+" + std::to_string(rows));
      }
    }
  }
}

TEST_F(CudaDeterministic, ResidualRowsDoNotDependOnTheirNeighbours) {
  const int64_t n = 200, out = 520, in = 2048;
  const std::vector<float> xv = randn(size_t(n * out), 40), av = randn(size_t(n * in), 41),
                           wv = randn(size_t(out * in), 42, 0.05f);
  const Tensor a = device({n, in}, av, DType::BF16), w = device({out, in}, wv, DType::BF16);
  const Tensor scratch = device({n, out}, std::vector<float>(size_t(n * out), 0.0f), DType::BF16);
  Tensor x = device({n, out}, xv, DType::BF16);
  gpu_->linear_residual(x, a, {scratch, w, Tensor()}, 0.5f);
  const std::vector<float> all = host(x);
  for (int64_t rows : {1, 9, 64, 100}) {
    const int64_t begin = n - rows;
    const std::vector<float> x_rows(xv.begin() + begin * out, xv.begin() + (begin + rows) * out);
    const Tensor xr = device({rows, out}, x_rows, DType::BF16);
    gpu_->linear_residual(xr, a.slice_rows(begin, begin + rows),
                          {scratch.slice_rows(0, rows), w, Tensor()}, 0.5f);
    expect_same_bits(all, host(xr), begin, out, "residual rows " + std::to_string(rows));
  }
}

// Wᵀ stored [in, out] (a dequantized transposed trellis matrix) gives the same bits as W: the
// mma sees the same values in the same order, only loaded through ldmatrix .trans.
TEST_F(CudaDeterministic, TransposedWeightsGiveTheSameBits) {
  const int64_t out = 136, in = 200;
  const std::vector<float> wv = randn(size_t(out * in), 60, 0.05f);
  std::vector<float> wt(wv.size());
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) wt[size_t(i * out + o)] = wv[size_t(o * in + i)];
  const Tensor w = device({out, in}, wv, DType::BF16), w_t = device({in, out}, wt, DType::BF16);
  cuda::Ctx ctx;
  ASSERT_EQ(cudaStreamCreate(&ctx.stream), cudaSuccess);
  cuda::linear_fixed_init();
  for (int64_t n : {1, 17, 100}) {
    const Tensor x = device({n, in}, randn(size_t(n * in), 61 + uint32_t(n)), DType::BF16);
    const Tensor y = device({n, out}, std::vector<float>(size_t(n * out), 0.0f), DType::F32),
                 y_t = device({n, out}, std::vector<float>(size_t(n * out), 0.0f), DType::F32);
    cuda::linear_fixed(ctx, cuda::Ten(y), out, cuda::Ten(x), w.data, out, cuda::Ten(), 1.0f, false,
                       false);
    cuda::linear_fixed(ctx, cuda::Ten(y_t), out, cuda::Ten(x), w_t.data, out, cuda::Ten(), 1.0f,
                       false, true);
    ASSERT_EQ(cudaStreamSynchronize(ctx.stream), cudaSuccess);
    expect_same_bits(host(y), host(y_t), 0, out, "Wᵀ, rows " + std::to_string(n));
  }
  cudaStreamDestroy(ctx.stream);
}

}  // namespace
}  // namespace hearth

#endif  // HEARTH_HAVE_CUDA
