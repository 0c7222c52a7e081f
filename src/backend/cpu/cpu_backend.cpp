// The CPU backend: forwards each Backend op to its kernel, on the process-wide thread pool or its
// own.
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/affine_matvec.h"
#include "backend/cpu/gated_delta.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed_matmul.h"
#include "core/error.h"
#include "core/memory_limit.h"
#include "core/thread_pool.h"

namespace hearth {

namespace {

class CpuBackend final : public Backend {
  bool keep_mapped_;
  bool batch_invariant_;
  std::vector<DeviceBuffer> owned_;
  // The threads of its ops: the process-wide pool, or its own (a tensor-parallel rank's share).
  // (Looked up per op: set_global_threads may replace the global pool.)
  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool& pool() const { return own_pool_ ? *own_pool_ : ThreadPool::global(); }

 public:
  CpuBackend(bool keep_mapped, bool batch_invariant, int n_threads)
      : keep_mapped_(keep_mapped),
        batch_invariant_(batch_invariant),
        own_pool_(n_threads > 0 ? std::make_unique<ThreadPool>(n_threads) : nullptr) {}
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::CPU; }
  DType activation_dtype() const override { return DType::F32; }
  // Buffers of 2 MiB or more (KV caches, prefill activations) are 2 MiB-aligned and advised for
  // huge pages: their first touch then takes one fault per 2 MiB instead of one per 4 KiB, which
  // on a virtual machine cost ~9 % of a 512-token prefill (the KV stores faulting in the cache).
  DeviceBuffer alloc(size_t bytes) override {
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t align = bytes >= kHuge ? kHuge : 64;
    const size_t rounded = bytes == 0 ? align : (bytes + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (!p) fail("out of memory allocating {} bytes", bytes);
    if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
    return DeviceBuffer(p, bytes, Device::CPU, [](void* q) { std::free(q); });
  }
  size_t memory_available() const override { return available_memory_bytes(); }
  // Weights are read in place from the mapped checkpoint (fast load, no copy). Without
  // keep_mapped (--no-mmap) each large tensor is copied once into 2 MiB-aligned anonymous memory
  // advised for huge pages and the mapped source pages are released: decode streams weights
  // ~40% faster that way here (4 KiB file pages cost TLB misses and stop the prefetchers), at
  // the price of ~2.5 s more load time for 1.2 GB. See docs/PERFORMANCE.md.
  Tensor prepare_weight(const Tensor& host) override {
    if (keep_mapped_ || host.nbytes() < (size_t(1) << 20)) return host;
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t bytes = (host.nbytes() + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (!p) fail("out of memory copying a weight of {} bytes", host.nbytes());
    madvise(p, bytes, MADV_HUGEPAGE);
    std::memcpy(p, host.data, host.nbytes());
    // Drop our mapping's copy of the source pages (the page cache keeps the file).
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(host.data) + 4095) & ~uintptr_t(4095);
    const uintptr_t end =
        (reinterpret_cast<uintptr_t>(host.data) + host.nbytes()) & ~uintptr_t(4095);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    owned_.emplace_back(p, host.nbytes(), Device::CPU, [](void* q) { std::free(q); });
    Tensor t = host;
    t.data = p;
    return t;
  }
  void copy(const Tensor& dst, const Tensor& src) override {
    std::memcpy(dst.data, src.data, src.nbytes());
  }
  void copy_from_host(const Tensor& dst, const void* src) override {
    std::memcpy(dst.data, src, dst.nbytes());
  }
  void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override {
    if (w.is_packed())
      cpu::packed_matmul(y, x, w, bias, pool(), batch_invariant_);
    else
      cpu::matmul(y, x, w, bias, pool(), batch_invariant_);
  }
  // Packed affine gate/up on the int8 decode path: both products and the activation in one pass
  // (cpu::affine_glu); everything else composes linear, linear and glu.
  void linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x, const LinearOut& gate,
                  const LinearOut& up, Activation act, const InputNorm* norm) override {
    if (!batch_invariant_ && !norm && gate.bias.empty() && up.bias.empty() && gate.w.is_packed() &&
        cpu::affine_glu(y, x, gate.w, up.w, act, pool()))
      return;
    Backend::linear_glu(y, up_scratch, x, gate, up, act, norm);
  }
  void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float s) override {
    if (!table.is_packed()) return cpu::embedding(y, table, ids, s);
    for (int64_t t = 0; t < y.rows(); ++t) {
      float* out = y.as<float>() + t * table.cols();
      cpu::packed_dequantize_rows(table, ids[t], ids[t] + 1, out);
      if (s != 1.0f)
        for (int64_t i = 0; i < table.cols(); ++i) out[i] *= s;
    }
  }
  void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps,
                float weight_offset) override {
    cpu::rms_norm(y, x, w, eps, weight_offset, pool());
  }
  void rope(const Tensor& x, const int32_t* positions, const RopeParams& rope) override {
    cpu::rope(x, positions, rope, pool());
  }
  void kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                const int32_t* positions) override {
    cpu::kv_store(kv, k, v, positions);
  }
  void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
                 const AttentionParams& params) override {
    cpu::attention(out, q, kv, positions, params, pool(), batch_invariant_);
  }
  void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) override {
    cpu::glu(y, gate, up, act, pool());
  }
  void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) override {
    cpu::add(y, a, b, b_scale, pool());
  }
  void scale(const Tensor& x, float s) override { cpu::scale(x, s); }
  void softcap(const Tensor& x, float cap) override { cpu::softcap(x, cap); }
  void to_host_f32(float* dst, const Tensor& src) override {
    cpu::load_f32(dst, src.data, src.dtype, src.numel());
  }
  void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                          const Tensor& w) override {
    cpu::conv1d_causal_silu(y, x, state, w, pool());
  }
  void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias) override {
    cpu::gated_delta_gates(g, beta, a, b, a_log, dt_bias);
  }
  void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                   const Tensor& state, const GatedDeltaParams& params) override {
    cpu::gated_delta(out, qkv, g, beta, state, params, pool());
  }
  void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                      float eps) override {
    cpu::rms_norm_gated(y, x, w, z, eps, pool());
  }
  void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) override {
    cpu::mul_sigmoid(y, x, gate);
  }
  void fill(const Tensor& y, float value) override {
    float* p = y.as<float>();
    for (int64_t i = 0, n = y.numel(); i < n; ++i) p[i] = value;
  }
  void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) override {
    cpu::gather_rows(y, x, rows);
  }
  void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                        const float* weights) override {
    cpu::scatter_add_rows(y, x, rows, weights);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(bool keep_weights_mapped, bool batch_invariant,
                                          int n_threads) {
  return std::make_unique<CpuBackend>(keep_weights_mapped, batch_invariant, n_threads);
}

}  // namespace hearth
