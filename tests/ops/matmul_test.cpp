// Tests for cpu::matmul: every kernel family this machine supports (generic, AVX2, AVX-512, AMX),
// forced through detail::matmul_with, against an f64 reference on random (never zero) inputs,
// outputs poisoned with NaN, weights misaligned by 2 bytes, awkward sizes, all weight and bias
// dtypes. Error is measured relative to the output's norm: f32-accumulating paths must be
// ~1e-7..1e-6; the AMX path (x split into bf16 hi + lo) must stay within a few 1e-6.
#include "backend/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace hearth::cpu {
namespace {

using detail::MatmulIsa;

// Raw bytes with a 2-byte offset so rows are only 2-byte aligned, like checkpoint views.
struct Weights {
  std::vector<char> bytes;
  std::vector<double> values;  // exactly representable in the dtype
  void* data() { return bytes.data() + 2; }
};

Weights make_weights(DType dt, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Weights w;
  int64_t count = rows * cols;
  w.bytes.assign(size_t(count) * dtype_size(dt) + 64, 0);
  w.values.resize(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    float v = dist(rng);
    if (v == 0.0f) v = 0.5f;
    char* dst = static_cast<char*>(w.data()) + i * int64_t(dtype_size(dt));
    if (dt == DType::BF16) {
      uint16_t h = f32_to_bf16(v);
      std::memcpy(dst, &h, 2);
      w.values[size_t(i)] = bf16_to_f32(h);
    } else if (dt == DType::F16) {
      uint16_t h = f32_to_f16(v);
      std::memcpy(dst, &h, 2);
      w.values[size_t(i)] = f16_to_f32(h);
    } else {
      std::memcpy(dst, &v, 4);
      w.values[size_t(i)] = v;
    }
  }
  return w;
}

std::vector<float> random_floats(int64_t count, std::mt19937& rng) {
  // A wide dynamic range, so the hi/lo split is exercised on more than [-1, 1].
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-6, 6);
  std::vector<float> v(static_cast<size_t>(count));
  for (auto& f : v) {
    f = std::ldexp(dist(rng), expo(rng));
    if (f == 0.0f) f = 0.25f;
  }
  return v;
}

// y = x·wᵀ in f64, and the scale its error is measured against: sqrt(Σ (w·x)²) over all
// products, which is what ||y|| is for random signs but does not collapse when a single output
// cancels to ~0 (out = 1, n = 1).
struct Reference {
  std::vector<double> y;
  std::vector<double> abs_sum;  // per output: Σ|w·x| (+ |bias|), the worst-case error scale
  double scale = 0;
};

Reference reference(const std::vector<float>& x, const Weights& w, int64_t n, int64_t in,
                    int64_t out) {
  Reference r;
  r.y.resize(size_t(n * out));
  r.abs_sum.resize(size_t(n * out));
  double sq = 0;
  for (int64_t j = 0; j < n; ++j)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0, as = 0;
      const double* wr = &w.values[size_t(o * in)];
      const float* xr = &x[size_t(j * in)];
      for (int64_t i = 0; i < in; ++i) {
        double p = wr[i] * double(xr[i]);
        s += p;
        as += std::fabs(p);
        sq += p * p;
      }
      r.y[size_t(j * out + o)] = s;
      r.abs_sum[size_t(j * out + o)] = as;
    }
  r.scale = std::sqrt(sq);
  return r;
}

// ||y - ref|| / scale, or +inf if any output is not finite (NaN poison left behind).
double rel_error(const std::vector<float>& y, const Reference& ref) {
  double num = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) return std::numeric_limits<double>::infinity();
    double d = double(y[i]) - ref.y[i];
    num += d * d;
  }
  return std::sqrt(num) / std::max(ref.scale, 1e-300);
}

// max over outputs of |y - ref| / Σ|w·x|: the per-product relative error in the worst case.
double elem_error(const std::vector<float>& y, const Reference& ref) {
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i)
    worst = std::max(worst, std::fabs(double(y[i]) - ref.y[i]) / std::max(ref.abs_sum[i], 1e-300));
  return worst;
}

std::vector<MatmulIsa> supported_isas() {
  std::vector<MatmulIsa> isas;
  for (MatmulIsa isa : {MatmulIsa::Generic, MatmulIsa::Avx2, MatmulIsa::Avx512, MatmulIsa::Amx})
    if (detail::matmul_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

// Bounds on ||err|| / scale and on max |err| / Σ|w·x|. f32 accumulation gives ~1e-7. AMX's
// bf16 hi + lo split of x leaves at most 2^-16 relative per product (|x - hi| <= 2^-8 |x|, and
// lo is rounded to 8 bits again), ~3e-6 in norm for random signs.
bool uses_split(MatmulIsa isa, DType wdt, int64_t n) {
  return isa == MatmulIsa::Amx && wdt == DType::BF16 && n >= 16;
}
double bound_for(MatmulIsa isa, DType wdt, int64_t n) {
  return uses_split(isa, wdt, n) ? 1e-5 : 1e-6;
}
double elem_bound_for(MatmulIsa isa, DType wdt, int64_t n) {
  return uses_split(isa, wdt, n) ? 1.0 / 65536 + 1e-6 : 2e-6;
}

void check_all(int64_t n, int64_t in, int64_t out, ThreadPool& pool, double* worst) {
  std::mt19937 rng(uint32_t(n * 1000003 + in * 101 + out));
  std::vector<float> x = random_floats(n * in, rng);
  Tensor xt(x.data(), DType::F32, {n, in});
  for (DType wdt : {DType::F32, DType::F16, DType::BF16}) {
    Weights w = make_weights(wdt, out, in, rng);
    Tensor wt(w.data(), wdt, {out, in});
    Reference ref0 = reference(x, w, n, in, out);
    // Bias handling does not depend on `in`: all bias dtypes on short rows only (keeps the
    // test fast enough for ASan builds).
    const int n_bias_kinds = in <= 100 ? 3 : 1;
    for (int bias_kind = 0; bias_kind < n_bias_kinds; ++bias_kind) {
      Weights b;
      Tensor bt;
      Reference ref = ref0;
      if (bias_kind > 0) {
        DType bdt = bias_kind == 1 ? DType::F32 : DType::BF16;
        b = make_weights(bdt, 1, out, rng);
        bt = Tensor(b.data(), bdt, {out});
        // The bias is one more term of every sum: it joins the error scale too.
        double sq = ref.scale * ref.scale;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t o = 0; o < out; ++o) {
            ref.y[size_t(j * out + o)] += b.values[size_t(o)];
            ref.abs_sum[size_t(j * out + o)] += std::fabs(b.values[size_t(o)]);
            sq += b.values[size_t(o)] * b.values[size_t(o)];
          }
        ref.scale = std::sqrt(sq);
      }
      for (MatmulIsa isa : supported_isas()) {
        std::vector<float> y(size_t(n * out), std::numeric_limits<float>::quiet_NaN());
        Tensor yt(y.data(), DType::F32, {n, out});
        detail::matmul_with(isa, yt, xt, wt, bt, pool);
        double err = rel_error(y, ref);
        double bound = bound_for(isa, wdt, n);
        double eerr = elem_error(y, ref);
        auto& wst = worst[int(isa) * 3 + (wdt == DType::F32 ? 0 : wdt == DType::F16 ? 1 : 2)];
        wst = std::max(wst, err);
        auto& west = worst[12 + int(isa) * 3 + (wdt == DType::F32 ? 0 : wdt == DType::F16 ? 1 : 2)];
        west = std::max(west, eerr);
        ASSERT_LE(eerr, elem_bound_for(isa, wdt, n))
            << "isa=" << detail::matmul_isa_name(isa) << " w=" << dtype_name(wdt)
            << " bias=" << bias_kind << " n=" << n << " in=" << in << " out=" << out;
        ASSERT_LE(err, bound) << "isa=" << detail::matmul_isa_name(isa) << " w=" << dtype_name(wdt)
                              << " bias=" << bias_kind << " n=" << n << " in=" << in
                              << " out=" << out;
      }
    }
  }
}

TEST(Matmul, AllPathsMatchF64Reference) {
  ThreadPool pool(2);
  double worst[24] = {};
  for (int64_t n : {1, 2, 3, 7, 17, 33, 64, 65, 130})
    for (int64_t in : {1, 17, 33, 64, 100, 1024, 4097})
      for (int64_t out : {1, 17, 33, 257}) {
        if (in > 1024 && n > 33) continue;  // the longest rows with few x rows suffice
        check_all(n, in, out, pool, worst);
        if (HasFatalFailure()) return;
      }
  for (MatmulIsa isa : supported_isas())
    std::printf(
        "  %-8s worst ||err||/scale: f32 %.2e f16 %.2e bf16 %.2e;"
        " max|err|/sum|wx|: f32 %.2e f16 %.2e bf16 %.2e\n",
        detail::matmul_isa_name(isa), worst[int(isa) * 3], worst[int(isa) * 3 + 1],
        worst[int(isa) * 3 + 2], worst[12 + int(isa) * 3], worst[12 + int(isa) * 3 + 1],
        worst[12 + int(isa) * 3 + 2]);
}

// Odd thread counts split the columns unevenly; one thread takes the no-pool path.
TEST(Matmul, ThreadCounts) {
  double worst[24] = {};
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 5, 40})
      for (int64_t out : {1, 50, 333}) {
        check_all(n, 96, out, pool, worst);
        if (HasFatalFailure()) return;
      }
  }
}

// The public entry point picks the best ISA and agrees with the reference.
TEST(Matmul, PublicEntryPoint) {
  std::mt19937 rng(7);
  const int64_t n = 20, in = 300, out = 70;
  std::vector<float> x = random_floats(n * in, rng);
  Weights w = make_weights(DType::BF16, out, in, rng);
  Reference ref = reference(x, w, n, in, out);
  std::vector<float> y(size_t(n * out), std::numeric_limits<float>::quiet_NaN());
  matmul(Tensor(y.data(), DType::F32, {n, out}), Tensor(x.data(), DType::F32, {n, in}),
         Tensor(w.data(), DType::BF16, {out, in}), Tensor(), ThreadPool::global());
  EXPECT_LE(rel_error(y, ref), 1e-5);
  EXPECT_FALSE(matmul_isa().empty());
}

// batch_invariant: every row of an n-row product is the bits that row gets alone (n = 1), for
// each ISA, dtype and awkward n (the GEMM and AMX sizes included), and within the reference's
// bound.
TEST(Matmul, BatchInvariantRowsEqualTheRowAlone) {
  ThreadPool pool(2);
  std::mt19937 rng(11);
  const int64_t in = 300, out = 77;
  for (int64_t n : {2, 5, 13, 40}) {
    std::vector<float> x = random_floats(n * in, rng);
    for (DType wdt : {DType::F32, DType::F16, DType::BF16}) {
      Weights w = make_weights(wdt, out, in, rng);
      const Tensor wt(w.data(), wdt, {out, in});
      const Reference ref = reference(x, w, n, in, out);
      for (MatmulIsa isa : supported_isas()) {
        std::vector<float> y(size_t(n * out));
        detail::matmul_with(isa, Tensor(y.data(), DType::F32, {n, out}),
                            Tensor(x.data(), DType::F32, {n, in}), wt, Tensor(), pool, true);
        EXPECT_LE(rel_error(y, ref), bound_for(isa, wdt, 1));
        for (int64_t j = 0; j < n; ++j) {
          std::vector<float> alone(static_cast<size_t>(out));
          detail::matmul_with(isa, Tensor(alone.data(), DType::F32, {1, out}),
                              Tensor(x.data() + j * in, DType::F32, {1, in}), wt, Tensor(), pool,
                              true);
          for (int64_t o = 0; o < out; ++o)
            ASSERT_EQ(y[size_t(j * out + o)], alone[size_t(o)])
                << "isa=" << detail::matmul_isa_name(isa) << " w=" << dtype_name(wdt) << " n=" << n
                << " row " << j << " col " << o;
        }
      }
    }
  }
}

}  // namespace
}  // namespace hearth::cpu
