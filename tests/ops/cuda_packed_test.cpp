// The CUDA backend's products and embeddings with packed weights (MLX affine, trellis) against a
// double-precision product with the values the format's reference decoder gives (src/quant), at
// awkward sizes: every affine bits value and group size, trellis k = 2..4 on both axes, 1, 3 and
// 8 input rows (the decode kernels) and 17 (dequantized rows through the GEMM), with and
// without bias, bf16 and host f32 outputs, and inside a recorded step replayed as a graph.
// Random codes: every state and code value occurs. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "quant/affine.h"
#include "quant/trellis.h"

#ifdef HEARTH_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"
#include "packed_host.h"

namespace hearth {
namespace {

using test::HostPacked;
using test::randn;
using test::random_affine;
using test::random_trellis;
using test::reference;

class CudaPacked : public test::CudaTest {
 protected:
  // Products of every row count through the GPU's linear, bf16 out (and f32 to the host for one
  // row count), against the reference. The bf16 output alone rounds by up to 2^-9.
  void check_products(const HostPacked& p, const std::string& what) {
    const int64_t rows = p.w.shape[0], in = p.w.shape[1];
    const Tensor w = gpu_->prepare_weight(p.w);
    for (bool with_bias : {false, true})
      for (int64_t n : {1, 3, 8, 17}) {
        const std::string label = what + " n=" + std::to_string(n) + (with_bias ? " bias" : "");
        auto x = make({n, in}, randn(size_t(n * in), uint32_t(n * 7 + in)));
        std::vector<float> bias_v =
            with_bias ? randn(size_t(rows), 11, 0.5f) : std::vector<float>{};
        auto bias = with_bias ? make({rows}, bias_v) : decltype(x){};
        auto y = out({n, rows});
        gpu_->linear(y.g, x.g, w, with_bias ? bias.g : Tensor());
        const auto want = reference(x.host, p, bias_v, n, rows, in);
        EXPECT_LT(test::rel_err(down(y.g), want), 1e-2) << label;
        if (n == 3) {  // logits to the host, f32
          std::vector<float> host(size_t(n * rows), NAN);
          gpu_->linear(Tensor(host.data(), DType::F32, {n, rows}), x.g, w,
                       with_bias ? bias.g : Tensor());
          EXPECT_LT(test::rel_err(host, want), 2e-4) << label << " f32 to host";
        }
      }
  }
};

TEST_F(CudaPacked, AffineEveryBitsAndGroup) {
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) {
      const int64_t out = 40 + bits, in = group * 3;
      const auto p = random_affine(out, in, bits, group, DType::BF16, uint32_t(bits * 131 + group));
      check_products(p, "affine bits=" + std::to_string(bits) + " group=" + std::to_string(group));
    }
}

TEST_F(CudaPacked, AffineF16ParamsAndWideRows) {
  // Rows long enough for several warps per row, and f16 scales and biases.
  const auto p = random_affine(24, 4096 + 64, 4, 64, DType::F16, 5);
  check_products(p, "affine f16 params");
  // Rows too long for one row's input to be staged in shared memory (the general kernels).
  check_products(random_affine(9, 25600, 3, 128, DType::BF16, 6), "affine long rows");
  check_products(random_trellis(5, 25600, 4, 1, 7), "trellis long rows");
}

TEST_F(CudaPacked, TrellisBothAxes) {
  for (int k : {2, 3, 4}) {
    const auto rows = random_trellis(37, 768, k, 1, uint32_t(k));
    check_products(rows, "trellis axis 1 k=" + std::to_string(k));
    const auto cols = random_trellis(512, 328, k, 0, uint32_t(k + 10));
    check_products(cols, "trellis axis 0 k=" + std::to_string(k));
  }
}

TEST_F(CudaPacked, EmbeddingRows) {
  const int64_t vocab = 50, H = 256;
  const int32_t ids[] = {0, 49, 7, 7, 23};
  const float scale = 1.5f;
  for (int axis : {1, 0}) {
    const auto p = axis == 1 ? random_affine(vocab, H, 4, 32, DType::BF16, 9)
                             : random_trellis(256, H, 3, 0, 10);
    const int64_t rows = p.w.shape[0];
    const Tensor table = gpu_->prepare_weight(p.w);
    auto y = out({5, H});
    gpu_->embedding(y.g, table, ids, scale);
    std::vector<float> want(size_t(5 * H));
    for (int t = 0; t < 5; ++t)
      for (int64_t c = 0; c < H; ++c)
        want[size_t(t * H + c)] = p.dense[size_t(int64_t(ids[t] % rows) * H + c)] * scale;
    EXPECT_LT(test::rel_err(down(y.g), want), 1e-2) << "axis " << axis;
  }
}

TEST_F(CudaPacked, RecordedStepsReplayAsGraphs) {
  // The decode products inside recorded steps: captured once, replayed with new inputs.
  const auto a = random_affine(96, 512, 4, 64, DType::BF16, 21);
  const auto t = random_trellis(512, 256, 3, 0, 22);
  const Tensor wa = gpu_->prepare_weight(a.w), wt = gpu_->prepare_weight(t.w);
  for (int step = 0; step < 3; ++step) {
    auto x = make({1, 512}, randn(512, uint32_t(100 + step)));
    auto x2 = make({1, 256}, randn(256, uint32_t(200 + step)));
    auto y = out({1, 96});
    std::vector<float> y2(512, NAN);
    gpu_->begin_step(1);
    gpu_->linear(y.g, x.g, wa, Tensor());
    gpu_->linear(Tensor(y2.data(), DType::F32, {1, 512}), x2.g, wt, Tensor());
    gpu_->end_step();
    EXPECT_LT(test::rel_err(down(y.g), reference(x.host, a, {}, 1, 96, 512)), 1e-2);
    EXPECT_LT(test::rel_err(y2, reference(x2.host, t, {}, 1, 512, 256)), 2e-4);
  }
}

}  // namespace
}  // namespace hearth

#endif  // HEARTH_HAVE_CUDA
