// The linear algebra of LDLQ (ldlq.h): the regularised Hessian and its block LDL, through a
// blocked right-looking Cholesky in f64. The project links no LAPACK; the sizes that matter
// (n up to ~14k for a down_proj) take n³/3 multiply-adds, parallel over rows.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/ldlq.h"

namespace hearth::quant {

namespace {

// Σ a[k]·b[k] over k < n, four partial sums so the compiler can keep them in vector lanes
// (without -ffast-math it may not reorder one running sum).
double dot(const double* a, const double* b, int64_t n) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    s0 += a[k] * b[k];
    s1 += a[k + 1] * b[k + 1];
    s2 += a[k + 2] * b[k + 2];
    s3 += a[k + 3] * b[k + 3];
  }
  for (; k < n; ++k) s0 += a[k] * b[k];
  return (s0 + s1) + (s2 + s3);
}

// Calls fn(i) for i in [begin, end), rows dealt out round-robin so that triangular work (row i
// costs ∝ i) is even across threads.
template <typename Fn>
void for_rows(ThreadPool* pool, int64_t begin, int64_t end, const Fn& fn) {
  if (!pool || end - begin < 64) {
    for (int64_t i = begin; i < end; ++i) fn(i);
    return;
  }
  pool->run([&](int task, int n_tasks) {
    for (int64_t i = begin + task; i < end; i += n_tasks) fn(i);
  });
}

// In place: the lower triangle of a [n, n] becomes the Cholesky factor C (a = C·Cᵀ); the upper
// triangle is left as it was. False when a is not (numerically) positive definite.
bool cholesky_lower(double* a, int64_t n, ThreadPool* pool) {
  constexpr int64_t kPanel = 64;
  for (int64_t j0 = 0; j0 < n; j0 += kPanel) {
    const int64_t j1 = std::min(n, j0 + kPanel);
    // The diagonal block (earlier panels' updates already applied).
    for (int64_t j = j0; j < j1; ++j) {
      double* rj = a + j * n;
      const double d = rj[j] - dot(rj + j0, rj + j0, j - j0);
      if (!(d > 0) || !std::isfinite(d)) return false;
      rj[j] = std::sqrt(d);
      for (int64_t i = j + 1; i < j1; ++i) {
        double* ri = a + i * n;
        ri[j] = (ri[j] - dot(ri + j0, rj + j0, j - j0)) / rj[j];
      }
    }
    // The panel below it: row i solves x·C_jjᵀ = a[i, j0:j1] by forward substitution, then
    // updates its part of the trailing matrix with the finished panel rows.
    for_rows(pool, j1, n, [&](int64_t i) {
      double* ri = a + i * n;
      for (int64_t j = j0; j < j1; ++j) {
        const double* rj = a + j * n;
        ri[j] = (ri[j] - dot(ri + j0, rj + j0, j - j0)) / rj[j];
      }
    });
    for_rows(pool, j1, n, [&](int64_t i) {
      double* ri = a + i * n;
      for (int64_t l = j1; l <= i; ++l) ri[l] -= dot(ri + j0, a + l * n + j0, j1 - j0);
    });
  }
  return true;
}

}  // namespace

std::vector<double> hessian_regularised(const float* h, int64_t n, double rel, const char* what) {
  std::vector<double> s(static_cast<size_t>(n * n));
  double trace = 0;
  for (int64_t i = 0; i < n * n; ++i) {
    if (!std::isfinite(h[i]))
      fail("{}: the Hessian has a non-finite entry at [{}, {}]", what, i / n, i % n);
    s[size_t(i)] = h[i];
  }
  for (int64_t i = 0; i < n; ++i) trace += s[size_t(i * n + i)];
  const double sigma = rel * trace / double(n);
  for (int64_t i = 0; i < n; ++i) s[size_t(i * n + i)] += sigma;
  return s;
}

std::vector<float> block_ldl_lower(const double* s, int64_t n, int64_t block, ThreadPool* pool) {
  if (n <= 0 || block <= 0 || n % block != 0)
    fail("block_ldl_lower: size {} is not a positive multiple of the block {}", n, block);
  std::vector<double> c(s, s + n * n);
  if (!cholesky_lower(c.data(), n, pool)) return {};
  // L = C·blockdiag(C_jj)⁻¹. The inverses of the diagonal blocks first (lower triangular, b³/6
  // each), so each row's part is a row-vector product read along contiguous rows.
  const int64_t n_blocks = n / block;
  std::vector<double> inv(static_cast<size_t>(n_blocks * block * block), 0.0);
  for_rows(pool, 0, n_blocks, [&](int64_t jb) {
    const int64_t j0 = jb * block;
    double* x = inv.data() + jb * block * block;  // [block, block], lower
    auto cb = [&](int64_t r, int64_t col) { return c[size_t((j0 + r) * n + j0 + col)]; };
    for (int64_t m = 0; m < block; ++m) {
      x[m * block + m] = 1.0 / cb(m, m);
      for (int64_t r = m + 1; r < block; ++r) {
        double v = 0;
        for (int64_t q = m; q < r; ++q) v += cb(r, q) * x[q * block + m];
        x[r * block + m] = -v / cb(r, r);
      }
    }
  });
  std::vector<float> l(static_cast<size_t>(n * n), 0.0f);
  for_rows(pool, 0, n, [&](int64_t i) {
    const int64_t own = i / block * block;
    float* li = l.data() + i * n;
    li[i] = 1.0f;
    std::vector<double> y(static_cast<size_t>(block));
    for (int64_t j0 = 0; j0 < own; j0 += block) {
      // y = C[i, block j] · C_jj⁻¹: y[0..q] += C[i][j0 + q] · inv[q][0..q].
      std::fill(y.begin(), y.end(), 0.0);
      const double* ci = c.data() + i * n + j0;
      const double* x = inv.data() + j0 / block * block * block;
      for (int64_t q = 0; q < block; ++q) {
        const double cq = ci[q];
        const double* xq = x + q * block;
        for (int64_t m = 0; m <= q; ++m) y[size_t(m)] += cq * xq[m];
      }
      for (int64_t m = 0; m < block; ++m) li[j0 + m] = float(y[size_t(m)]);
    }
  });
  return l;
}

}  // namespace hearth::quant
