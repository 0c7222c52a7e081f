// Block LDLQ for the trellis coder (ldlq.h): the two feedback orders (axis 1 across 256-column
// blocks of each row, axis 0 across stored rows), the proxy loss and the guard against plain
// Viterbi. Every block is still coded by the run's block coder (trellis_coder.h) with the row
// scale rule of quantize_trellis_rows, so the output is an ordinary trellis module.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/ldlq.h"
#include "quant/trellis.h"
#include "quant/trellis_coder.h"

namespace hearth::quant {

namespace {

constexpr int kT = TrellisSpec::kBlock;
constexpr double kRegularisation = 1e-2;  // σ = 1e-2 · mean diag H (QTIP, mlx-bun)

bool cancelled(const std::atomic<bool>* cancel) {
  return cancel && cancel->load(std::memory_order_relaxed);
}

// Runs job(task, n_tasks) on the pool, or once on this thread.
template <typename Job>
void run_tasks(ThreadPool* pool, const Job& job) {
  if (pool)
    pool->run(job);
  else
    job(0, 1);
}

// The rows [begin, end) of one of n_tasks equal shares.
struct Share {
  int64_t begin, end;
  Share(int64_t n, int task, int n_tasks)
      : begin(n * task / n_tasks), end(n * (task + 1) / n_tasks) {}
};

// axis 1: rows are independent; within a row, blocks of 256 input columns are coded last to
// first, block j towards w_j + Σ_{i ≥ 256(j+1)} e_i·L[i, block j], e = w − ŵ. Every row's block
// j goes to the coder in one batch, so a GPU codes all rows at once.
void ldlq_axis1(const float* w, int64_t rows, int64_t cols, int k, const float* l, uint32_t* codes,
                uint16_t* scales_f16, ThreadPool* pool, TrellisBlockCoder& coder,
                const std::atomic<bool>* cancel) {
  const int64_t n_blocks = cols / kT;
  const int words = TrellisSpec::block_words(k);
  std::vector<float> scale(static_cast<size_t>(rows)), inv(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    // The plain pass already ran this rule on every row (and threw there if a row was bad).
    scales_f16[r] = trellis_row_scale(w + r * cols, cols, r, &inv[size_t(r)]);
    scale[size_t(r)] = f16_to_f32(scales_f16[r]);
  }
  std::vector<float> err(static_cast<size_t>(rows * cols), 0.0f);
  std::vector<float> x(static_cast<size_t>(rows * kT));
  std::vector<uint32_t> block_codes(static_cast<size_t>(rows * words));
  for (int64_t j = n_blocks - 1; j >= 0; --j) {
    if (cancelled(cancel)) return;
    const int64_t j0 = j * kT;
    run_tasks(pool, [&](int task, int n_tasks) {
      const Share share(rows, task, n_tasks);
      for (int64_t r = share.begin; r < share.end; ++r) {
        float target[kT];
        std::memcpy(target, w + r * cols + j0, sizeof(target));
        const float* er = err.data() + r * cols;
        for (int64_t i = j0 + kT; i < cols; ++i) {
          const float e = er[i];
          if (e == 0.0f) continue;
          const float* li = l + i * cols + j0;
          for (int t = 0; t < kT; ++t) target[t] += e * li[t];
        }
        float* xr = x.data() + r * kT;
        for (int t = 0; t < kT; ++t) xr[t] = target[t] * inv[size_t(r)];
      }
    });
    coder.encode(x.data(), rows, k, block_codes.data());
    run_tasks(pool, [&](int task, int n_tasks) {
      const Share share(rows, task, n_tasks);
      float decoded[kT];
      for (int64_t r = share.begin; r < share.end; ++r) {
        const uint32_t* bc = block_codes.data() + r * words;
        std::copy(bc, bc + words, codes + (r * n_blocks + j) * words);
        trellis_decode_block(bc, k, decoded);
        const float* wr = w + r * cols + j0;
        float* er = err.data() + r * cols + j0;
        for (int t = 0; t < kT; ++t) er[t] = wr[t] - decoded[t] * scale[size_t(r)];
      }
    });
  }
}

// axis 0: stored row i (input feature i) is coded after rows i' > i, towards
// w_i + Σ_{i'>i} L[i'][i]·e_i' (scalar LDL). The row's blocks go to the coder as one batch.
void ldlq_axis0(const float* w, int64_t rows, int64_t cols, int k, const float* l, uint32_t* codes,
                uint16_t* scales_f16, ThreadPool* pool, TrellisBlockCoder& coder,
                const std::atomic<bool>* cancel) {
  const int64_t n_blocks = cols / kT;
  const int words = TrellisSpec::block_words(k);
  std::vector<float> err(static_cast<size_t>(rows * cols), 0.0f);
  std::vector<float> target(static_cast<size_t>(cols)), x(static_cast<size_t>(cols));
  for (int64_t i = rows - 1; i >= 0; --i) {
    if (cancelled(cancel)) return;
    const float* wi = w + i * cols;
    // The pull of the coded rows' errors, split over column ranges.
    run_tasks(pool, [&](int task, int n_tasks) {
      const Share share(cols, task, n_tasks);
      for (int64_t c = share.begin; c < share.end; ++c) target[size_t(c)] = wi[c];
      for (int64_t q = i + 1; q < rows; ++q) {
        const float coef = l[q * rows + i];
        if (coef == 0.0f) continue;
        const float* eq = err.data() + q * cols;
        for (int64_t c = share.begin; c < share.end; ++c) target[size_t(c)] += coef * eq[c];
      }
    });
    float inv = 0;
    scales_f16[i] = trellis_row_scale(target.data(), cols, i, &inv);
    const float scale = f16_to_f32(scales_f16[i]);
    for (int64_t c = 0; c < cols; ++c) x[size_t(c)] = target[size_t(c)] * inv;
    uint32_t* row_codes = codes + i * n_blocks * words;
    coder.encode(x.data(), n_blocks, k, row_codes);
    float decoded[kT];
    for (int64_t b = 0; b < n_blocks; ++b) {
      trellis_decode_block(row_codes + b * words, k, decoded);
      float* ei = err.data() + i * cols + b * kT;
      for (int t = 0; t < kT; ++t) ei[t] = wi[b * kT + t] - decoded[t] * scale;
    }
  }
}

// The stored-layout difference decoded − w.
std::vector<float> decoded_delta(const float* w, const uint32_t* codes, const uint16_t* scales,
                                 int64_t rows, int64_t cols, int k) {
  std::vector<float> d(static_cast<size_t>(rows * cols));
  dequantize_trellis_rows(codes, scales, rows, cols, k, d.data());
  for (int64_t i = 0; i < rows * cols; ++i) d[size_t(i)] -= w[i];
  return d;
}

}  // namespace

double trellis_proxy_loss(const float* delta, int64_t rows, int64_t cols, const float* h, int axis,
                          ThreadPool* pool) {
  if (axis != 0 && axis != 1) fail("trellis_proxy_loss: axis must be 0 or 1, got {}", axis);
  // axis 1: Σ_r δ_r·H·δ_rᵀ; axis 0: Σ_{i,i'} H[i][i']·(δ_i·δ_i'). One term per row, summed in
  // row order afterwards so the result does not depend on the thread count.
  const int64_t n = axis == 1 ? cols : rows;
  std::vector<double> per_row(static_cast<size_t>(rows), 0.0);
  std::atomic<int64_t> next{0};
  run_tasks(pool, [&](int, int) {
    std::vector<double> hd(static_cast<size_t>(n));
    for (;;) {
      const int64_t r = next.fetch_add(1, std::memory_order_relaxed);
      if (r >= rows) return;
      const float* dr = delta + r * cols;
      double sum = 0;
      if (axis == 1) {
        for (int64_t a = 0; a < n; ++a) {
          const float* ha = h + a * n;
          double s = 0;
          for (int64_t b = 0; b < n; ++b) s += double(ha[b]) * dr[b];
          sum += s * dr[a];
        }
      } else {
        const float* hr = h + r * n;
        for (int64_t q = 0; q < rows; ++q) {
          if (hr[q] == 0.0f) continue;
          const float* dq = delta + q * cols;
          double s = 0;
          for (int64_t c = 0; c < cols; ++c) s += double(dr[c]) * dq[c];
          sum += double(hr[q]) * s;
        }
      }
      per_row[size_t(r)] = sum;
    }
  });
  double total = 0;
  for (double v : per_row) total += v;
  return total;
}

TrellisLdlqResult quantize_trellis_rows_ldlq(const float* w, int64_t rows, int64_t cols, int k,
                                             const float* h, int axis, uint32_t* codes,
                                             uint16_t* scales_f16, ThreadPool* pool,
                                             const std::atomic<bool>* cancel,
                                             TrellisBlockCoder* coder) {
  trellis_check_bits(k, "quantize_trellis_rows_ldlq");
  if (axis != 0 && axis != 1) fail("quantize_trellis_rows_ldlq: axis must be 0 or 1, got {}", axis);
  if (rows <= 0 || cols <= 0 || cols % kT != 0)
    fail("quantize_trellis_rows_ldlq: cols must be a positive multiple of {}, got [{}, {}]", kT,
         rows, cols);
  if (!h) fail("quantize_trellis_rows_ldlq: no Hessian given");
  const int64_t n = axis == 1 ? cols : rows;  // the input dim: H is [n, n]

  std::unique_ptr<TrellisBlockCoder> own;
  if (!coder) coder = (own = make_cpu_trellis_coder(pool)).get();
  TrellisLdlqResult result;
  quantize_trellis_rows(w, rows, cols, k, codes, scales_f16, pool, coder);
  if (cancelled(cancel)) return result;
  result.proxy_plain = trellis_proxy_loss(decoded_delta(w, codes, scales_f16, rows, cols, k).data(),
                                          rows, cols, h, axis, pool);

  std::vector<double> s = hessian_regularised(h, n, kRegularisation, "quantize_trellis_rows_ldlq");
  double trace = 0;
  for (int64_t i = 0; i < n; ++i) trace += s[size_t(i * n + i)];
  if (!(trace > 0)) return result;  // no calibration input reached this module
  const std::vector<float> l = block_ldl_lower(s.data(), n, axis == 1 ? kT : 1, pool);
  s = {};
  if (l.empty()) return result;  // not positive definite even regularised: keep plain

  const int64_t words = rows * TrellisSpec::row_words(cols, k);
  std::vector<uint32_t> ldlq_codes(static_cast<size_t>(words));
  std::vector<uint16_t> ldlq_scales(static_cast<size_t>(rows));
  if (axis == 1)
    ldlq_axis1(w, rows, cols, k, l.data(), ldlq_codes.data(), ldlq_scales.data(), pool, *coder,
               cancel);
  else
    ldlq_axis0(w, rows, cols, k, l.data(), ldlq_codes.data(), ldlq_scales.data(), pool, *coder,
               cancel);
  if (cancelled(cancel)) return result;
  result.proxy_ldlq = trellis_proxy_loss(
      decoded_delta(w, ldlq_codes.data(), ldlq_scales.data(), rows, cols, k).data(), rows, cols, h,
      axis, pool);
  if (result.proxy_ldlq < result.proxy_plain) {
    result.used_ldlq = true;
    std::copy(ldlq_codes.begin(), ldlq_codes.end(), codes);
    std::copy(ldlq_scales.begin(), ldlq_scales.end(), scales_f16);
  }
  return result;
}

}  // namespace hearth::quant
