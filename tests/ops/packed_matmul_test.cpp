// cpu::packed_matmul (the CPU backend's linear for packed weights) against a plain product with
// the weights its format decodes to, at awkward sizes: every affine bits value and group size,
// trellis axis 1 and 0, 1-9 input rows (codes read directly) and 17-40 (dequantized blocks, more
// than one block of output rows), biases, and rows of a packed weight cut with slice_rows; the
// affine decode kernels of every ISA family this CPU has at 1-8 input rows.
#include "backend/cpu/packed_matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/affine_matvec.h"
#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/error.h"
#include "quant/affine.h"
#include "quant/trellis.h"

namespace hearth {
namespace {

struct Packed {
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales, biases;   // bf16 or f16 parameters
  std::vector<float> scales32, biases32;  // f32 parameters
  std::vector<float> dense;               // [out, in], the decoded values
  std::vector<float> bias;  // affine: [out, in], each value's group bias (dense − bias = s·q)
  int group = 0;
  Tensor w;
};

// Scales and biases stored in `param` (BF16, F16 or F32); dense holds what they decode to.
Packed make_affine(int64_t out, int64_t in, int bits, int group, std::mt19937& rng,
                   DType param = DType::BF16) {
  Packed p;
  std::normal_distribution<float> normal(0.0f, 0.5f);
  const int64_t groups = in / group, words = quant::affine_words_per_row(in, bits);
  p.codes.resize(static_cast<size_t>(out * words));
  p.scales.resize(static_cast<size_t>(out * groups));
  p.biases.resize(p.scales.size());
  p.scales32.resize(p.scales.size());
  p.biases32.resize(p.scales.size());
  p.dense.resize(static_cast<size_t>(out * in));
  p.bias.resize(p.dense.size());
  p.group = group;
  std::vector<float> row(static_cast<size_t>(in)), s(static_cast<size_t>(groups)), b(s.size());
  for (int64_t r = 0; r < out; ++r) {
    for (auto& v : row) v = normal(rng);
    uint32_t* rc = p.codes.data() + r * words;
    quant::affine_quantize_row(row.data(), in, bits, group, rc, s.data(), b.data());
    for (int64_t g = 0; g < groups; ++g) {
      const size_t at = size_t(r * groups + g);
      if (param == DType::F16) {
        p.scales[at] = f32_to_f16(s[size_t(g)]);
        p.biases[at] = f32_to_f16(b[size_t(g)]);
        s[size_t(g)] = f16_to_f32(p.scales[at]);
        b[size_t(g)] = f16_to_f32(p.biases[at]);
      } else if (param == DType::BF16) {
        p.scales[at] = f32_to_bf16(s[size_t(g)]);
        p.biases[at] = f32_to_bf16(b[size_t(g)]);
        s[size_t(g)] = bf16_to_f32(p.scales[at]);
        b[size_t(g)] = bf16_to_f32(p.biases[at]);
      }
      p.scales32[at] = s[size_t(g)];
      p.biases32[at] = b[size_t(g)];
    }
    quant::affine_requantize_row(row.data(), in, bits, group, s.data(), b.data(), rc);
    quant::affine_dequantize_row(rc, s.data(), b.data(), in, bits, group, p.dense.data() + r * in);
    for (int64_t i = 0; i < in; ++i) p.bias[size_t(r * in + i)] = b[size_t(i / group)];
  }
  p.w = Tensor(p.codes.data(), DType::U32, {out, in});
  const bool f32 = param == DType::F32;
  p.w.packed = {WeightFormat::Affine,
                uint8_t(bits),
                1,
                uint16_t(group),
                param,
                f32 ? static_cast<const void*>(p.scales32.data()) : p.scales.data(),
                f32 ? static_cast<const void*>(p.biases32.data()) : p.biases.data()};
  return p;
}

// axis 1: W [out, in] coded along in; axis 0: Wᵀ [in, out] coded along out.
Packed make_trellis(int64_t out, int64_t in, int k, int axis, std::mt19937& rng) {
  Packed p;
  std::normal_distribution<float> normal(0.0f, 0.5f);
  const int64_t rows = axis == 1 ? out : in, cols = axis == 1 ? in : out;
  std::vector<float> stored(static_cast<size_t>(rows * cols)), decoded(stored.size());
  for (auto& v : stored) v = normal(rng);
  p.codes.resize(static_cast<size_t>(rows * cols * k / 32));
  p.scales.resize(static_cast<size_t>(rows));
  quant::quantize_trellis_rows(stored.data(), rows, cols, k, p.codes.data(), p.scales.data(),
                               nullptr);
  quant::dequantize_trellis_rows(p.codes.data(), p.scales.data(), rows, cols, k, decoded.data());
  p.dense.resize(static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      p.dense[size_t(o * in + i)] =
          axis == 1 ? decoded[size_t(o * in + i)] : decoded[size_t(i * out + o)];
  p.w = Tensor(p.codes.data(), DType::U32, {out, in});
  p.w.packed = {WeightFormat::Trellis, uint8_t(k), uint8_t(axis), 256, DType::F16,
                p.scales.data(),       nullptr};
  return p;
}

using Product = std::function<void(const Tensor& y, const Tensor& x, const Tensor& bias)>;

// The error int8 activations may add to output o of input row t (affine_matvec.h): x rounded to
// dx = max|x| / 127 per 32 inputs moves each product by at most |s·q| · dx / 2 (a little more
// for the f32 rounding of x / dx).
double int8_activation_bound(const Packed& p, const float* x, int64_t in, int64_t o) {
  double bound = 0;
  for (int64_t b = 0; b < in / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    for (int i = 0; i < 32; ++i) {
      const size_t at = size_t(o * in + b * 32 + i);
      bound += std::fabs(double(p.dense[at]) - p.bias[at]) * (amax / 127.0) * 0.5001;
    }
  }
  return bound;
}

// y = x · denseᵀ + bias in f64, compared with `product` (packed_matmul unless given); with
// int8_bound, allowing for int8 activations (affine only). A block of x is zero in some rows.
void check(const Packed& p, int64_t out, int64_t in, int64_t n, bool with_bias, std::mt19937& rng,
           Product product = {}, bool int8_bound = false) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * in)), bias(static_cast<size_t>(out));
  for (auto& v : x) v = normal(rng);
  for (int64_t t = 1; t < n; t += 3) std::fill_n(x.begin() + t * in, 32, 0.0f);
  for (auto& v : bias) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(n * out), std::nanf(""));
  Tensor xt(x.data(), DType::F32, {n, in}), yt(y.data(), DType::F32, {n, out});
  Tensor bt = with_bias ? Tensor(bias.data(), DType::F32, {out}) : Tensor();
  if (product)
    product(yt, xt, bt);
  else
    cpu::packed_matmul(yt, xt, p.w, bt, ThreadPool::global());
  float max_w = 0;
  for (float v : p.dense) max_w = std::max(max_w, std::fabs(v));
  for (int64_t t = 0; t < n; ++t) {
    // f32 sums of up to `in` products, each at most |x_i| · max|w| (a wrong code moves one
    // product by a whole step, far more than this).
    double x_abs = 0;
    for (int64_t i = 0; i < in; ++i) x_abs += std::fabs(x[size_t(t * in + i)]);
    const double tol = 1e-5 * x_abs * max_w + 1e-6;
    for (int64_t o = 0; o < out; ++o) {
      const double act =
          int8_bound ? int8_activation_bound(p, x.data() + t * in, in, o) * (1 + 1e-6) : 0.0;
      double want = with_bias ? bias[size_t(o)] : 0.0;
      for (int64_t i = 0; i < in; ++i)
        want += double(x[size_t(t * in + i)]) * p.dense[size_t(o * in + i)];
      ASSERT_NEAR(y[size_t(t * out + o)], want, tol + act)
          << "row " << t << " output " << o << " of " << p.w.describe() << ", n " << n;
    }
  }
}

TEST(PackedMatmul, AffineMatchesItsDecodedWeights) {
  std::mt19937 rng(7);
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128})
      for (int64_t out : {1, 17, 33, 600}) {
        const int64_t in = group * (out % 2 ? 3 : 2);
        Packed p = make_affine(out, in, bits, group, rng);
        // 4 bits may take the int8-activation kernels.
        for (int64_t n : {1, 2, 7, 9, 17}) check(p, out, in, n, n % 2 == 1, rng, {}, bits == 4);
      }
}

// The int8-activation kernels this CPU runs, against the f64 product within the bound of x's
// rounding: 4 bits (8 stay on f32 activations), every group size (group 32: two scales in one
// step), rows of 1-3 64-input pairs beyond the group, 1-8 input rows and 9 and 17 (several passes),
// zero blocks.
TEST(PackedMatmul, AffineInt8KernelsOfEveryIsa) {
  std::mt19937 rng(6);
  // 8-bit weights keep f32 activations: there the rounding of x would be most of the error.
  EXPECT_TRUE(cpu::detail::affine_int8_isas(8).empty());
  for (int bits : {4})
    for (const std::string& isa : cpu::detail::affine_int8_isas(bits))
      for (int group : {32, 64, 128})
        for (int64_t out : {1, 13, 67}) {
          SCOPED_TRACE(isa + " bits " + std::to_string(bits));
          const int64_t in = std::max<int64_t>(group, 64) * (out % 3 + 1);
          const DType param = out == 1 ? DType::F32 : out == 13 ? DType::F16 : DType::BF16;
          Packed p = make_affine(out, in, bits, group, rng, param);
          for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 38})
            check(
                p, out, in, n, false, rng,
                [&](const Tensor& y, const Tensor& x, const Tensor&) {
                  cpu::detail::affine_matvec_int8_with(isa, y, x, p.w, ThreadPool::global());
                },
                true);
        }
  // Many input rows at once (the GEMM where there is one) give what the same rows give one at a
  // time: the activations are rounded the same way, so only f32 summation order differs.
  for (int bits : {4})
    for (const std::string& isa : cpu::detail::affine_int8_isas(bits))
      for (int group : {32, 128}) {
        SCOPED_TRACE(isa + " bits " + std::to_string(bits) + " group " + std::to_string(group));
        const int64_t out = 70, in = 256, n = 23;
        Packed p = make_affine(out, in, bits, group, rng, DType::BF16);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(size_t(n * in)), many(size_t(n * out)), one(size_t(n * out));
        for (auto& v : x) v = normal(rng);
        cpu::detail::affine_matvec_int8_with(isa, Tensor(many.data(), DType::F32, {n, out}),
                                             Tensor(x.data(), DType::F32, {n, in}), p.w,
                                             ThreadPool::global());
        for (int64_t t = 0; t < n; ++t)
          cpu::detail::affine_matvec_int8_with(
              isa, Tensor(one.data() + t * out, DType::F32, {1, out}),
              Tensor(x.data() + t * in, DType::F32, {1, in}), p.w, ThreadPool::global());
        for (size_t i = 0; i < many.size(); ++i)
          ASSERT_NEAR(many[i], one[i], 1e-4 * (1 + std::fabs(one[i]))) << "at " << i;
      }
  std::vector<float> x(96), y(1);
  Packed p = make_affine(1, 96, 4, 32, rng);  // 96 inputs: not whole 64-input pairs
  for (const std::string& isa : cpu::detail::affine_int8_isas(4))
    EXPECT_THROW(cpu::detail::affine_matvec_int8_with(isa, Tensor(y.data(), DType::F32, {1, 1}),
                                                      Tensor(x.data(), DType::F32, {1, 96}), p.w,
                                                      ThreadPool::global()),
                 Error);
}

// The affine decode kernels of every family this CPU runs, at every bits value and group size,
// 1-8 input rows (one pass over W), row counts that split unevenly across threads, and rows of
// 1-5 groups.
TEST(PackedMatmul, AffineDecodeKernelsOfEveryIsa) {
  std::mt19937 rng(5);
  for (const std::string& isa : cpu::detail::affine_matvec_isas())
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int group : {32, 64, 128})
        for (int64_t out : {1, 13, 67}) {
          SCOPED_TRACE(isa);
          const int64_t in = group * (out % 5 + 1);
          Packed p = make_affine(out, in, bits, group, rng);
          for (int64_t n = 1; n <= 8; ++n)
            check(p, out, in, n, false, rng, [&](const Tensor& y, const Tensor& x, const Tensor&) {
              cpu::detail::affine_matvec_with(isa, y, x, p.w, ThreadPool::global());
            });
        }
}

// The fused gate/up product gives what two products and the activation give, and
// declines what it does not take (more than 8 rows, another format, mismatched shapes).
TEST(PackedMatmul, AffineGluEqualsProductsThenActivation) {
  std::mt19937 rng(8);
  if (cpu::detail::affine_int8_isas(4).empty()) GTEST_SKIP() << "no int8 kernels on this CPU";
  for (Activation act : {Activation::Silu, Activation::GeluTanh})
    for (int group : {32, 64})
      for (int64_t n : {1, 3, 8}) {
        const int64_t out = 77, in = 192;
        Packed g = make_affine(out, in, 4, group, rng), u = make_affine(out, in, 4, group, rng);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(size_t(n * in)), fused(size_t(n * out), NAN), yg(fused.size()),
            yu(fused.size()), want(fused.size());
        for (auto& v : x) v = normal(rng);
        const Tensor xt(x.data(), DType::F32, {n, in});
        ASSERT_TRUE(cpu::affine_glu(Tensor(fused.data(), DType::F32, {n, out}), xt, g.w, u.w, act,
                                    ThreadPool::global()));
        cpu::affine_matvec(Tensor(yg.data(), DType::F32, {n, out}), xt, g.w, ThreadPool::global());
        cpu::affine_matvec(Tensor(yu.data(), DType::F32, {n, out}), xt, u.w, ThreadPool::global());
        cpu::glu_span(want.data(), yg.data(), yu.data(), n * out, act);
        // The same products; the activation's vector and scalar exp split the rows differently.
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(fused[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
              << "group " << group << " n " << n << " at " << i;
      }
  Packed g = make_affine(16, 128, 4, 64, rng), u8 = make_affine(16, 128, 8, 64, rng);
  std::vector<float> x(9 * 128), y(9 * 16);
  EXPECT_FALSE(cpu::affine_glu(Tensor(y.data(), DType::F32, {9, 16}),
                               Tensor(x.data(), DType::F32, {9, 128}), g.w, g.w, Activation::Silu,
                               ThreadPool::global()));  // 9 rows: prefill
  EXPECT_FALSE(cpu::affine_glu(Tensor(y.data(), DType::F32, {1, 16}),
                               Tensor(x.data(), DType::F32, {1, 128}), g.w, u8.w, Activation::Silu,
                               ThreadPool::global()));  // 8-bit up
}

TEST(PackedMatmul, AffineDecodeRefusesBadArguments) {
  std::mt19937 rng(9);
  Packed p = make_affine(4, 64, 4, 32, rng);
  std::vector<float> x(64), y(4);
  Tensor xt(x.data(), DType::F32, {1, 64}), yt(y.data(), DType::F32, {1, 4});
  EXPECT_THROW(cpu::detail::affine_matvec_with("no-such-isa", yt, xt, p.w, ThreadPool::global()),
               Error);
  p.w.packed.bits = 7;
  EXPECT_THROW(cpu::affine_matvec(yt, xt, p.w, ThreadPool::global()), Error);
}

TEST(PackedMatmul, TrellisMatchesItsDecodedWeights) {
  std::mt19937 rng(11);
  for (int k : {2, 3, 4})
    for (int axis : {1, 0}) {
      const int64_t out = axis == 1 ? 17 : 256, in = axis == 1 ? 512 : 33;
      Packed p = make_trellis(out, in, k, axis, rng);
      for (int64_t n : {1, 3, 8, 9, 20}) check(p, out, in, n, n == 3, rng);
    }
  // Transposed, 768 outputs: prefill dequantizes 512-row blocks, the second one partial.
  Packed p = make_trellis(768, 40, 3, 0, rng);
  for (int64_t n : {9, 20}) check(p, 768, 40, n, false, rng);
}

// Rows of W (embedding lookups) from a weight of each layout, across 256-blocks of a transposed
// one, equal the decoded matrix's.
TEST(PackedMatmul, DequantizeRowsOfEveryLayout) {
  std::mt19937 rng(5);
  const Packed layouts[] = {make_affine(520, 64, 4, 64, rng), make_trellis(520, 256, 3, 1, rng),
                            make_trellis(768, 40, 3, 0, rng)};
  for (const Packed& p : layouts) {
    const int64_t out = p.w.rows(), in = p.w.cols();
    for (auto [r0, r1] :
         {std::pair<int64_t, int64_t>{0, 1}, {250, 260}, {255, 513}, {out - 1, out}}) {
      std::vector<float> got(static_cast<size_t>((r1 - r0) * in), NAN);
      cpu::packed_dequantize_rows(p.w, r0, r1, got.data());
      const std::vector<float> want(p.dense.begin() + r0 * in, p.dense.begin() + r1 * in);
      EXPECT_EQ(got, want) << p.w.describe() << " rows " << r0 << ".." << r1;
    }
  }
}

TEST(PackedMatmul, SliceRowsKeepsScalesAndBiases) {
  std::mt19937 rng(3);
  Packed p = make_affine(40, 64, 3, 32, rng);
  Packed part;
  part.w = p.w.slice_rows(9, 31);
  part.dense.assign(p.dense.begin() + 9 * 64, p.dense.begin() + 31 * 64);
  check(part, 22, 64, 2, false, rng);
  check(part, 22, 64, 19, true, rng);
  Packed t = make_trellis(256, 64, 2, 0, rng);
  EXPECT_THROW(t.w.slice_rows(0, 8), Error);
}

}  // namespace
}  // namespace hearth
