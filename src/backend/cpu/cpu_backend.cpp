// The CPU backend: forwards each Backend op to its kernel, with the process-wide thread pool.
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/gated_delta.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace hearth {

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::CPU; }
  DType activation_dtype() const override { return DType::F32; }
  DeviceBuffer alloc(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) fail("out of memory allocating {} bytes", bytes);
    return DeviceBuffer(p, bytes, Device::CPU, [](void* q) { std::free(q); });
  }
  Tensor prepare_weight(const Tensor& host) override { return host; }  // read in place
  void copy(const Tensor& dst, const Tensor& src) override {
    std::memcpy(dst.data, src.data, src.nbytes());
  }
  void copy_from_host(const Tensor& dst, const void* src) override {
    std::memcpy(dst.data, src, dst.nbytes());
  }
  void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override {
    cpu::matmul(y, x, w, bias, ThreadPool::global());
  }
  void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float s) override {
    cpu::embedding(y, table, ids, s);
  }
  void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps,
                float weight_offset) override {
    cpu::rms_norm(y, x, w, eps, weight_offset);
  }
  void rope(const Tensor& x, const int32_t* positions, const RopeParams& rope) override {
    cpu::rope(x, positions, rope);
  }
  void kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                const int32_t* positions) override {
    cpu::kv_store(kv, k, v, positions);
  }
  void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
                 const AttentionParams& params) override {
    cpu::attention(out, q, kv, positions, params, ThreadPool::global());
  }
  void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) override {
    cpu::glu(y, gate, up, act);
  }
  void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) override {
    cpu::add(y, a, b, b_scale);
  }
  void scale(const Tensor& x, float s) override { cpu::scale(x, s); }
  void softcap(const Tensor& x, float cap) override { cpu::softcap(x, cap); }
  void to_host_f32(float* dst, const Tensor& src) override {
    cpu::load_f32(dst, src.data, src.dtype, src.numel());
  }
  void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                          const Tensor& w) override {
    cpu::conv1d_causal_silu(y, x, state, w);
  }
  void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias) override {
    cpu::gated_delta_gates(g, beta, a, b, a_log, dt_bias);
  }
  void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                   const Tensor& state, const GatedDeltaParams& params) override {
    cpu::gated_delta(out, qkv, g, beta, state, params, ThreadPool::global());
  }
  void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                      float eps) override {
    cpu::rms_norm_gated(y, x, w, z, eps);
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

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace hearth
