// The CPU backend: forwards each Backend op to its kernel, with the process-wide thread pool.
#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "core/thread_pool.h"

namespace hearth {

namespace {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
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
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace hearth
