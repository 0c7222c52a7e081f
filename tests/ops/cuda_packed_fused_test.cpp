// The CUDA backend's fused decode products with packed weights (the decode GEMV reading MLX
// affine and trellis codes): several outputs of one input with the input norm folded in, the
// GLU, the residual add (the trellis down projection's transposed kernels too), formats that
// cannot share a launch, and all of them recorded and replayed as graphs. Against a
// double-precision product with the values the format's reference decoder gives; the input
// norm's output is rounded to bf16 as the kernel stages it. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

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

// A format of the decode GEMV and a maker of random weights in it ([out, in], in a multiple of
// 256 and of the group).
struct Format {
  std::string name;
  std::function<HostPacked(int64_t out, int64_t in, uint32_t seed)> make;
};
const std::vector<Format>& formats() {
  static const std::vector<Format> all = {
      {"affine4 g64",
       [](int64_t o, int64_t i, uint32_t s) { return random_affine(o, i, 4, 64, DType::BF16, s); }},
      {"affine3 g32 f16",
       [](int64_t o, int64_t i, uint32_t s) { return random_affine(o, i, 3, 32, DType::F16, s); }},
      {"affine8 g128", [](int64_t o, int64_t i,
                          uint32_t s) { return random_affine(o, i, 8, 128, DType::BF16, s); }},
      {"trellis2", [](int64_t o, int64_t i, uint32_t s) { return random_trellis(o, i, 2, 1, s); }},
      {"trellis3", [](int64_t o, int64_t i, uint32_t s) { return random_trellis(o, i, 3, 1, s); }},
      {"trellis4", [](int64_t o, int64_t i, uint32_t s) { return random_trellis(o, i, 4, 1, s); }},
  };
  return all;
}

float silu(double v) { return float(v / (1.0 + std::exp(-v))); }
float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

class CudaPackedFused : public test::CudaTest {
 protected:
  // rms_norm(x) * (gain + offset) per row, rounded to bf16 as the GEMV stages it.
  static std::vector<float> normalised(const std::vector<float>& x, const std::vector<float>& gain,
                                       int64_t n, int64_t in, float eps, float offset) {
    std::vector<float> y(x.size());
    for (int64_t r = 0; r < n; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < in; ++i) ss += double(x[size_t(r * in + i)]) * x[size_t(r * in + i)];
      const double inv = 1.0 / std::sqrt(ss / double(in) + eps);
      for (int64_t i = 0; i < in; ++i)
        y[size_t(r * in + i)] =
            round_bf16(float(x[size_t(r * in + i)] * inv * (gain[size_t(i)] + offset)));
    }
    return y;
  }
};

TEST_F(CudaPackedFused, LinearManyWithAndWithoutNorm) {
  const int64_t in = 512;
  const std::vector<int64_t> outs = {40, 8, 300};
  uint32_t seed = 1;
  for (const Format& f : formats()) {
    std::vector<HostPacked> ws;
    std::vector<Tensor> wg;
    for (int64_t rows : outs) {
      ws.push_back(f.make(rows, in, seed++));
      wg.push_back(gpu_->prepare_weight(ws.back().w));
    }
    for (int64_t n : {1, 3, 8})
      for (bool norm : {false, true}) {
        const std::string label =
            f.name + " n=" + std::to_string(n) + (norm ? " norm" : " no norm");
        auto x = make({n, in}, randn(size_t(n * in), seed++));
        const std::vector<float> gain_v = randn(size_t(in), seed++, 0.3f);
        auto gain = make({in}, gain_v, DType::F32);
        auto scratch = out({n, in});
        std::vector<Pair> ys;
        std::vector<std::vector<float>> biases;
        std::vector<Pair> bs;
        for (int64_t rows : outs) {
          ys.push_back(out({n, rows}));
          biases.push_back(randn(size_t(rows), seed++, 0.5f));
          bs.push_back(make({rows}, biases.back()));
        }
        std::vector<Backend::LinearOut> jobs;
        for (size_t i = 0; i < outs.size(); ++i) jobs.push_back({ys[i].g, wg[i], bs[i].g});
        const Backend::InputNorm gn{gain.g, 1e-6f, 1.0f, scratch.g};
        gpu_->linear_many(x.g, jobs.data(), int(jobs.size()), norm ? &gn : nullptr);
        const std::vector<float> input =
            norm ? normalised(x.host, gain_v, n, in, 1e-6f, 1.0f) : x.host;
        for (size_t i = 0; i < outs.size(); ++i)
          EXPECT_LT(
              test::rel_err(down(ys[i].g), reference(input, ws[i], biases[i], n, outs[i], in)),
              1e-2)
              << label << " output " << i;
      }
  }
}

TEST_F(CudaPackedFused, LinearGluWithNorm) {
  const int64_t in = 768, ff = 72;
  uint32_t seed = 100;
  for (const Format& f : formats()) {
    const HostPacked gate = f.make(ff, in, seed++), up = f.make(ff, in, seed++);
    const Tensor gw = gpu_->prepare_weight(gate.w), uw = gpu_->prepare_weight(up.w);
    for (int64_t n : {1, 5})
      for (bool norm : {false, true}) {
        auto x = make({n, in}, randn(size_t(n * in), seed++));
        const std::vector<float> gain_v = randn(size_t(in), seed++, 0.3f);
        auto gain = make({in}, gain_v, DType::F32);
        auto scratch = out({n, in});
        auto y = out({n, ff}), up_scratch = out({n, ff});
        const Backend::InputNorm gn{gain.g, 1e-6f, 0.0f, scratch.g};
        gpu_->linear_glu(y.g, up_scratch.g, x.g, {y.g, gw, Tensor()}, {up_scratch.g, uw, Tensor()},
                         Activation::Silu, norm ? &gn : nullptr);
        const std::vector<float> input =
            norm ? normalised(x.host, gain_v, n, in, 1e-6f, 0.0f) : x.host;
        const auto a = reference(input, gate, {}, n, ff, in),
                   b = reference(input, up, {}, n, ff, in);
        std::vector<float> want(a.size());
        for (size_t i = 0; i < a.size(); ++i) want[i] = silu(a[i]) * b[i];
        EXPECT_LT(test::rel_err(down(y.g), want), 1e-2)
            << f.name << " n=" << n << (norm ? " norm" : "");
      }
  }
}

// x += rounded(in · Wᵀ + bias) * scale, for every row format and for a trellis weight stored
// transposed (its column kernels add their sum into x).
TEST_F(CudaPackedFused, LinearResidual) {
  std::vector<Format> all = formats();
  all.push_back({"trellis3 transposed",
                 [](int64_t o, int64_t i, uint32_t s) { return random_trellis(o, i, 3, 0, s); }});
  uint32_t seed = 200;
  for (const Format& f : all) {
    const int64_t out_dim = 512, in = 768;
    const HostPacked w = f.make(out_dim, in, seed++);
    const Tensor wg = gpu_->prepare_weight(w.w);
    for (int64_t n : {1, 4}) {
      auto x = make({n, out_dim}, randn(size_t(n * out_dim), seed++));
      auto a = make({n, in}, randn(size_t(n * in), seed++));
      const std::vector<float> bias_v = randn(size_t(out_dim), seed++, 0.5f);
      auto bias = make({out_dim}, bias_v);
      auto y = out({n, out_dim});
      gpu_->linear_residual(x.g, a.g, {y.g, wg, bias.g}, 0.5f);
      const auto product = reference(a.host, w, bias_v, n, out_dim, in);
      std::vector<float> want(x.host.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = x.host[i] + round_bf16(product[i]) * 0.5f;
      EXPECT_LT(test::rel_err(down(x.g), want), 1e-2) << f.name << " n=" << n;
    }
  }
}

// Outputs whose formats cannot share one launch (affine and trellis, bf16 beside packed) are
// composed instead, with the same results.
TEST_F(CudaPackedFused, MixedFormatsCompose) {
  const int64_t in = 512, n = 2;
  const HostPacked a = random_affine(64, in, 4, 64, DType::BF16, 300);
  const HostPacked t = random_trellis(48, in, 3, 1, 301);
  const std::vector<float> dense_v = randn(size_t(32 * in), 302, 0.05f);
  auto dense = make({32, in}, dense_v);
  const Tensor ag = gpu_->prepare_weight(a.w), tg = gpu_->prepare_weight(t.w);
  auto x = make({n, in}, randn(size_t(n * in), 303));
  const std::vector<float> gain_v = randn(size_t(in), 304, 0.3f);
  auto gain = make({in}, gain_v, DType::F32);
  auto scratch = out({n, in});
  auto ya = out({n, 64}), yt = out({n, 48}), yd = out({n, 32});
  const Backend::LinearOut jobs[] = {
      {ya.g, ag, Tensor()}, {yt.g, tg, Tensor()}, {yd.g, dense.g, Tensor()}};
  const Backend::InputNorm gn{gain.g, 1e-6f, 0.0f, scratch.g};
  gpu_->linear_many(x.g, jobs, 3, &gn);
  const std::vector<float> input = normalised(x.host, gain_v, n, in, 1e-6f, 0.0f);
  HostPacked d;
  d.dense = dense_v;
  EXPECT_LT(test::rel_err(down(ya.g), reference(input, a, {}, n, 64, in)), 1e-2);
  EXPECT_LT(test::rel_err(down(yt.g), reference(input, t, {}, n, 48, in)), 1e-2);
  EXPECT_LT(test::rel_err(down(yd.g), reference(input, d, {}, n, 32, in)), 1e-2);
}

// A packed layer's decode products inside recorded steps: captured once, replayed with new
// inputs (the fused GEMV's launches and the transposed kernels' partial sums).
TEST_F(CudaPackedFused, RecordedStepsReplayAsGraphs) {
  const int64_t H = 512, ff = 768;
  const HostPacked q = random_affine(H, H, 4, 64, DType::BF16, 400);
  const HostPacked gate = random_trellis(ff, H, 3, 1, 401), up = random_trellis(ff, H, 3, 1, 402);
  const HostPacked downp = random_trellis(H, ff, 3, 0, 403);
  const Tensor qg = gpu_->prepare_weight(q.w), gg = gpu_->prepare_weight(gate.w),
               ug = gpu_->prepare_weight(up.w), dg = gpu_->prepare_weight(downp.w);
  const std::vector<float> gain_v = randn(size_t(H), 404, 0.3f);
  auto gain = make({H}, gain_v, DType::F32);
  auto scratch = out({1, H});
  for (int step = 0; step < 3; ++step) {
    auto x = make({1, H}, randn(size_t(H), uint32_t(500 + step)));
    auto yq = out({1, H}), h = out({1, ff}), up_scratch = out({1, ff}), yd = out({1, H});
    const Backend::InputNorm gn{gain.g, 1e-6f, 0.0f, scratch.g};
    const Backend::LinearOut job{yq.g, qg, Tensor()};
    gpu_->begin_step(1);
    gpu_->linear_many(x.g, &job, 1, &gn);
    gpu_->linear_glu(h.g, up_scratch.g, x.g, {h.g, gg, Tensor()}, {up_scratch.g, ug, Tensor()},
                     Activation::Silu, &gn);
    gpu_->linear_residual(x.g, h.g, {yd.g, dg, Tensor()}, 1.0f);
    gpu_->end_step();
    const std::vector<float> input = normalised(x.host, gain_v, 1, H, 1e-6f, 0.0f);
    EXPECT_LT(test::rel_err(down(yq.g), reference(input, q, {}, 1, H, H)), 1e-2) << step;
    const auto a = reference(input, gate, {}, 1, ff, H), b = reference(input, up, {}, 1, ff, H);
    std::vector<float> hidden(a.size());
    for (size_t i = 0; i < a.size(); ++i) hidden[i] = round_bf16(silu(a[i]) * b[i]);
    EXPECT_LT(test::rel_err(down(h.g), hidden), 1e-2) << step;
    const auto product = reference(hidden, downp, {}, 1, H, ff);
    std::vector<float> want(static_cast<size_t>(H));
    for (int64_t i = 0; i < H; ++i)
      want[size_t(i)] = x.host[size_t(i)] + round_bf16(product[size_t(i)]);
    EXPECT_LT(test::rel_err(down(x.g), want), 1e-2) << step;
  }
}

}  // namespace
}  // namespace hearth

#endif  // HEARTH_HAVE_CUDA
