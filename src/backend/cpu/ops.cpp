// Elementwise and per-row CPU ops. These are a small share of a forward pass (matmul dominates),
// so they are plain loops the compiler vectorises; per-row work is split across threads only
// where rows are many (prefill).
#include "backend/cpu/ops.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"

namespace hearth::cpu {

namespace {
// Elements below which an op runs on the calling thread (waking the pool costs more).
constexpr int64_t kParallelElements = 1 << 15;
}  // namespace

void load_f32(float* dst, const void* src, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case DType::BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + i, 2);  // checkpoint data may be only 2-byte aligned
        dst[i] = bf16_to_f32(h);
      }
      return;
    }
    case DType::F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, s + i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    }
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = NAN;  // callers check dtypes at load
  }
}

void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float scale) {
  const int64_t n_embd = table.cols();
  const size_t row_bytes = size_t(n_embd) * dtype_size(table.dtype);
  for (int64_t t = 0; t < y.rows(); ++t) {
    float* out = y.as<float>() + t * n_embd;
    load_f32(out, table.as<const char>() + size_t(ids[t]) * row_bytes, table.dtype, n_embd);
    if (scale != 1.0f)
      for (int64_t i = 0; i < n_embd; ++i) out[i] *= scale;
  }
}

void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps, float weight_offset,
              ThreadPool& pool) {
  const int64_t n = x.cols(), n_w = w.numel();
  // Gains are converted once per call: at most a few thousand elements.
  thread_local std::vector<float> gain;
  gain.resize(size_t(n_w));
  load_f32(gain.data(), w.data, w.dtype, n_w);
  for (auto& g : gain) g += weight_offset;
  const int64_t rows = x.rows() * (n / n_w), len = n_w;
  const float* src = x.as<const float>();
  float* dst = y.as<float>();
  const float* g = gain.data();
  auto norm_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = src + r * len;
      float* yr = dst + r * len;
      // Sum in f32 in a fixed order, as torch's pow(2).mean() does on the CPU within rounding.
      float sum = 0.0f;
      for (int64_t i = 0; i < len; ++i) sum += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(sum / float(len) + eps);
      for (int64_t i = 0; i < len; ++i) yr[i] = xr[i] * inv * g[i];
    }
  };
  // Prefill's many rows go to the pool (each row still summed in the same order); a decode
  // step's one row is not worth waking it.
  if (rows * len >= kParallelElements)
    pool.parallel_for(rows, 1, norm_rows);
  else
    norm_rows(0, rows);
}

void rope(const Tensor& x, const int32_t* positions, const RopeParams& rope, ThreadPool& pool) {
  const int64_t n_tokens = x.dim(0), n_heads = x.dim(1), head_dim = x.dim(2);
  const int half = rope.rotary_dim / 2;
  auto rotate_tokens = [&](int64_t t0, int64_t t1) {
    std::vector<float> cos_table(static_cast<size_t>(half)), sin_table(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      for (int i = 0; i < half; ++i) {
        // Same float32 product as Hugging Face (inv_freq @ position), then cos/sin.
        const float angle = float(positions[t]) * rope.inv_freq[i];
        cos_table[size_t(i)] = std::cos(angle) * rope.attention_factor;
        sin_table[size_t(i)] = std::sin(angle) * rope.attention_factor;
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x.as<float>() + (t * n_heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cos_table[size_t(i)] - b * sin_table[size_t(i)];
          v[i + half] = b * cos_table[size_t(i)] + a * sin_table[size_t(i)];
        }
      }
    }
  };
  if (n_tokens * n_heads * half >= kParallelElements)
    pool.parallel_for(n_tokens, 1, rotate_tokens);
  else
    rotate_tokens(0, n_tokens);
}

// glu and add live in glu.cpp (vectorised and threaded for prefill).

void scale(const Tensor& x, float s) {
  float* p = x.as<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] *= s;
}

void softcap(const Tensor& x, float cap) {
  float* p = x.as<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] = std::tanh(p[i] / cap) * cap;
}

void kv_store(const KvView& kv, const Tensor& k, const Tensor& v, const int32_t* positions) {
  const int64_t row = k.numel() / k.dim(0);  // n_head_kv * head_dim
  for (int64_t t = 0; t < k.dim(0); ++t)
    kv.for_each_run(positions[t], 1, [&](int64_t, int64_t, std::byte* kr, std::byte* vr) {
      std::memcpy(kr, k.as<const float>() + t * row, size_t(row) * 4);
      std::memcpy(vr, v.as<const float>() + t * row, size_t(row) * 4);
    });
}

}  // namespace hearth::cpu
