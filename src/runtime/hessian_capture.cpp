// The calibration decorator (hessian_capture.h): H accumulation (a symmetric rank-m update,
// "SYRK", on the upper triangle) and the forwarding of every other op.
#include "runtime/hessian_capture.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/thread_pool.h"

namespace hearth {

namespace {

typedef float v8f __attribute__((vector_size(32)));

constexpr int64_t kTile = 4;     // H rows and columns per micro-tile (16 vector accumulators)
constexpr int64_t kPanel = 128;  // H columns per task: their xᵀ rows stay in L2 while i runs

// xt: xᵀ [np, mp], zero-padded (np % 4 == 0, mp % 8 == 0). Adds the dot products of xt rows
// i..i+3 and j..j+3 into h for every (i ≤ j) tile of the panel of columns [j0, j1).
[[gnu::always_inline]] inline void syrk_panel(const float* xt, int64_t mp, int64_t n, int64_t j0,
                                              int64_t j1, float* h) {
  for (int64_t i = 0; i < j1; i += kTile) {
    for (int64_t j = std::max(j0, i); j < j1; j += kTile) {
      v8f acc[kTile][kTile] = {};
      for (int64_t t = 0; t < mp; t += 8) {
        v8f a[kTile], b[kTile];
        for (int64_t r = 0; r < kTile; ++r) std::memcpy(&a[r], xt + (i + r) * mp + t, 32);
        for (int64_t c = 0; c < kTile; ++c) std::memcpy(&b[c], xt + (j + c) * mp + t, 32);
        for (int64_t r = 0; r < kTile; ++r)
          for (int64_t c = 0; c < kTile; ++c) acc[r][c] += a[r] * b[c];
      }
      for (int64_t r = 0; r < kTile && i + r < n; ++r)
        for (int64_t c = 0; c < kTile && j + c < n; ++c) {
          const v8f v = acc[r][c];
          h[(i + r) * n + j + c] +=
              ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
        }
    }
  }
}

using PanelFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, float*);
void syrk_panel_base(const float* xt, int64_t mp, int64_t n, int64_t j0, int64_t j1, float* h) {
  syrk_panel(xt, mp, n, j0, j1, h);
}
#if defined(__x86_64__)
[[gnu::target("avx2,fma")]] void syrk_panel_avx2(const float* xt, int64_t mp, int64_t n, int64_t j0,
                                                 int64_t j1, float* h) {
  syrk_panel(xt, mp, n, j0, j1, h);
}
#endif

PanelFn best_panel_fn() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return syrk_panel_avx2;
#endif
  return syrk_panel_base;
}

}  // namespace

void hessian_accumulate(float* h, int64_t n, const float* x, int64_t m, ThreadPool& pool) {
  static const PanelFn panel = best_panel_fn();
  const int64_t np = (n + kTile - 1) / kTile * kTile, mp = (m + 7) / 8 * 8;
  thread_local std::vector<float> xt;
  xt.assign(static_cast<size_t>(np * mp), 0.0f);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t i = 0; i < n; ++i) xt[size_t(i * mp + t)] = x[t * n + i];
  const float* xt_data = xt.data();  // inside the job, `xt` would name each worker's own copy
  const int64_t n_panels = (np + kPanel - 1) / kPanel;
  // Panel p costs ∝ its last column: dealt out round-robin, the threads' shares stay even.
  pool.run([&](int task, int n_tasks) {
    for (int64_t p = task; p < n_panels; p += n_tasks)
      panel(xt_data, mp, n, p * kPanel, std::min(np, (p + 1) * kPanel), h);
  });
}

HessianBuffer::HessianBuffer(int64_t n, bool spill, const std::filesystem::path& spill_dir)
    : bytes_(size_t(n) * size_t(n) * sizeof(float)), spilled_(spill) {
  void* p = MAP_FAILED;
  if (!spill) {
    p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("out of memory for a {}x{} Hessian", n, n);
  } else {
    const std::filesystem::path dir =
        spill_dir.empty() ? std::filesystem::temp_directory_path() : spill_dir;
    std::string path = (dir / "hearth-hessian-XXXXXX").string();
    const int fd = mkstemp(path.data());
    if (fd < 0)
      fail("cannot create a Hessian spill file in {}: {}", dir.string(), std::strerror(errno));
    ::unlink(path.c_str());  // gone from the directory at once; the mapping keeps the data
    int err = 0;
    if (::ftruncate(fd, off_t(bytes_)) == 0) {
      p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) err = errno;
    } else {
      err = errno;
    }
    ::close(fd);
    if (p == MAP_FAILED)
      fail("cannot spill a {}x{} Hessian to {}: {}", n, n, dir.string(), std::strerror(err));
  }
  data_ = static_cast<float*>(p);
}

HessianBuffer::HessianBuffer(HessianBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(o.bytes_), spilled_(o.spilled_) {}

HessianBuffer& HessianBuffer::operator=(HessianBuffer&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, bytes_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = o.bytes_;
    spilled_ = o.spilled_;
  }
  return *this;
}

HessianBuffer::~HessianBuffer() {
  if (data_) munmap(data_, bytes_);
}

HessianCaptureBackend::HessianCaptureBackend(std::unique_ptr<Backend> inner, Options options)
    : inner_(std::move(inner)), options_(std::move(options)) {
  if (inner_->activation_dtype() != DType::F32)
    fail("calibration needs a backend with f32 activations (the CPU), got '{}'", inner_->name());
}

HessianCaptureBackend::~HessianCaptureBackend() = default;

size_t HessianCaptureBackend::new_accumulator(int64_t n) {
  const size_t bytes = size_t(n) * size_t(n) * sizeof(float);
  const bool spill = ram_bytes_ + bytes > options_.memory_budget;
  acc_.push_back({n, 0, HessianBuffer(n, spill, options_.spill_dir)});
  (spill ? spilled_bytes_ : ram_bytes_) += bytes;
  return acc_.size() - 1;
}

void HessianCaptureBackend::linear(const Tensor& y, const Tensor& x, const Tensor& w,
                                   const Tensor& bias) {
  const int64_t n = x.cols(), m = x.rows();
  const bool same_input = x.data == last_x_ && m == last_rows_;
  auto it = by_weight_.find(w.data);
  size_t a;
  if (it != by_weight_.end()) {
    a = it->second;
  } else {
    // A new weight reading the input its predecessor just read joins that H.
    a = same_input && acc_[last_acc_].n == n ? last_acc_ : new_accumulator(n);
    by_weight_.emplace(w.data, a);
  }
  // A weight whose input width differs from its H's is a model bug; leave it out, not crash.
  if (acc_[a].n == n && !(same_input && a == last_acc_)) {
    hessian_accumulate(acc_[a].h.data(), n, x.as<const float>(), m, ThreadPool::global());
    acc_[a].rows += m;
  }
  inner_->linear(y, x, w, bias);
  last_x_ = x.data;
  last_rows_ = m;
  last_acc_ = a;
}

void HessianCaptureBackend::embedding(const Tensor& y, const Tensor& table, const int32_t* ids,
                                      float scale) {
  forget_input();
  lookup_tables_.insert(table.data);
  inner_->embedding(y, table, ids, scale);
}

void HessianCaptureBackend::finish() {
  for (auto& a : acc_) {
    float* h = a.h.data();
    for (int64_t i = 0; i < a.n; ++i)
      for (int64_t j = i + 1; j < a.n; ++j) h[j * a.n + i] = h[i * a.n + j];
  }
}

void HessianCaptureBackend::copy(const Tensor& dst, const Tensor& src) {
  forget_input();
  inner_->copy(dst, src);
}
void HessianCaptureBackend::copy_from_host(const Tensor& dst, const void* src) {
  forget_input();
  inner_->copy_from_host(dst, src);
}
void HessianCaptureBackend::rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps,
                                     float weight_offset) {
  forget_input();
  inner_->rms_norm(y, x, w, eps, weight_offset);
}
void HessianCaptureBackend::rope(const Tensor& x, const int32_t* positions,
                                 const RopeParams& rope) {
  forget_input();
  inner_->rope(x, positions, rope);
}
void HessianCaptureBackend::kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                                     const int32_t* positions) {
  forget_input();
  inner_->kv_store(kv, k, v, positions);
}
void HessianCaptureBackend::attention(const Tensor& out, const Tensor& q, const KvView& kv,
                                      const int32_t* positions, const AttentionParams& params) {
  forget_input();
  inner_->attention(out, q, kv, positions, params);
}
void HessianCaptureBackend::glu(const Tensor& y, const Tensor& gate, const Tensor& up,
                                Activation act) {
  forget_input();
  inner_->glu(y, gate, up, act);
}
void HessianCaptureBackend::add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) {
  forget_input();
  inner_->add(y, a, b, b_scale);
}
void HessianCaptureBackend::scale(const Tensor& x, float s) {
  forget_input();
  inner_->scale(x, s);
}
void HessianCaptureBackend::softcap(const Tensor& x, float softcap) {
  forget_input();
  inner_->softcap(x, softcap);
}
void HessianCaptureBackend::to_host_f32(float* dst, const Tensor& src) {
  forget_input();
  inner_->to_host_f32(dst, src);
}
void HessianCaptureBackend::conv1d_causal_silu(const Tensor& y, const Tensor& x,
                                               const Tensor& state, const Tensor& w) {
  forget_input();
  inner_->conv1d_causal_silu(y, x, state, w);
}
void HessianCaptureBackend::gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a,
                                              const Tensor& b, const Tensor& a_log,
                                              const Tensor& dt_bias) {
  forget_input();
  inner_->gated_delta_gates(g, beta, a, b, a_log, dt_bias);
}
void HessianCaptureBackend::gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g,
                                        const Tensor& beta, const Tensor& state,
                                        const GatedDeltaParams& params) {
  forget_input();
  inner_->gated_delta(out, qkv, g, beta, state, params);
}
void HessianCaptureBackend::rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w,
                                           const Tensor& z, float eps) {
  forget_input();
  inner_->rms_norm_gated(y, x, w, z, eps);
}
void HessianCaptureBackend::mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) {
  forget_input();
  inner_->mul_sigmoid(y, x, gate);
}
void HessianCaptureBackend::fill(const Tensor& y, float value) {
  forget_input();
  inner_->fill(y, value);
}
void HessianCaptureBackend::gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) {
  forget_input();
  inner_->gather_rows(y, x, rows);
}
void HessianCaptureBackend::scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                                             const float* weights) {
  forget_input();
  inner_->scatter_add_rows(y, x, rows, weights);
}

}  // namespace hearth
