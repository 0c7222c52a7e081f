// HessianCaptureBackend: a Backend decorator for calibration. It forwards every op to the backend
// it wraps (the CPU) and, in linear(), adds the input rows' outer products to H = Σ x·xᵀ of the
// weight's input. The fused entry points (linear_many, linear_glu, linear_residual, moe_experts,
// gated_delta_mixer, decode_layers) are deliberately not forwarded: Backend's composed forms run
// instead and reach linear() once per product, so every product is seen, an MoE expert with only
// its routed rows. The arithmetic equals the CPU backend's, which composes them the same way.
// Weights that read the same input share one H: consecutive linear() calls on the same input
// view with no other op in between (q/k/v, gate/up) accumulate it once.
// H lives in RAM up to a byte budget; further H live in unlinked files under a spill directory,
// mapped shared, so the kernel writes them out under memory pressure and nothing is left behind.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace hearth {

// An n×n f32 matrix, zero at first, in anonymous memory or (spilled) in a shared mapping of a
// file created in `spill_dir` and unlinked at once. Move-only; unmaps when destroyed.
class HessianBuffer {
 public:
  HessianBuffer(int64_t n, bool spill, const std::filesystem::path& spill_dir);
  HessianBuffer(HessianBuffer&& o) noexcept;
  HessianBuffer& operator=(HessianBuffer&& o) noexcept;
  HessianBuffer(const HessianBuffer&) = delete;
  HessianBuffer& operator=(const HessianBuffer&) = delete;
  ~HessianBuffer();
  float* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool spilled() const { return spilled_; }

 private:
  float* data_ = nullptr;
  size_t bytes_ = 0;
  bool spilled_ = false;
};

class HessianCaptureBackend final : public Backend {
 public:
  struct Options {
    size_t memory_budget = size_t(4) << 30;  // bytes of H kept in anonymous memory
    std::filesystem::path spill_dir;         // for the rest; empty: the system's temp dir
  };
  // One H = Σ x·xᵀ [n, n] f32 (upper triangle while capturing; symmetric after finish()).
  struct Accumulator {
    int64_t n = 0;
    int64_t rows = 0;  // input rows added (tokens; for an MoE expert, its routed rows)
    HessianBuffer h;
  };

  HessianCaptureBackend(std::unique_ptr<Backend> inner, Options options);
  ~HessianCaptureBackend() override;

  // Mirrors every H's upper triangle into the lower one. Call once, after the last forward.
  void finish();
  // Each weight (its data pointer) that linear() saw, and the index of its accumulator.
  const std::map<const void*, size_t>& weight_accumulators() const { return by_weight_; }
  const std::vector<Accumulator>& accumulators() const { return acc_; }
  // Moves the accumulators out (they outlive the model that owns this backend).
  std::vector<Accumulator> take_accumulators() { return std::move(acc_); }
  // Whether `table` was read by embedding() (a lookup table, e.g. a tied embedding).
  bool is_lookup_table(const void* table) const { return lookup_tables_.count(table) != 0; }
  size_t spilled_bytes() const { return spilled_bytes_; }

  // --- Backend: linear and embedding observe; everything else forwards ---
  void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override;
  void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float scale) override;
  std::string name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  DeviceBuffer alloc(size_t bytes) override { return inner_->alloc(bytes); }
  Tensor prepare_weight(const Tensor& host) override { return inner_->prepare_weight(host); }
  void copy(const Tensor& dst, const Tensor& src) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps,
                float weight_offset) override;
  void rope(const Tensor& x, const int32_t* positions, const RopeParams& rope) override;
  void kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                const int32_t* positions) override;
  void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
                 const AttentionParams& params) override;
  void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) override;
  void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) override;
  void scale(const Tensor& x, float s) override;
  void softcap(const Tensor& x, float softcap) override;
  void to_host_f32(float* dst, const Tensor& src) override;
  void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                          const Tensor& w) override;
  void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias) override;
  void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                   const Tensor& state, const GatedDeltaParams& params) override;
  void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                      float eps) override;
  void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) override;
  void fill(const Tensor& y, float value) override;
  void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) override;
  void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                        const float* weights) override;

 private:
  // Any op but linear() may change the memory a remembered input view shows.
  void forget_input() { last_x_ = nullptr; }
  size_t new_accumulator(int64_t n);

  std::unique_ptr<Backend> inner_;
  Options options_;
  std::vector<Accumulator> acc_;
  std::map<const void*, size_t> by_weight_;
  std::set<const void*> lookup_tables_;
  size_t ram_bytes_ = 0, spilled_bytes_ = 0;
  // The input of the last linear(), while no other op has run since.
  const void* last_x_ = nullptr;
  int64_t last_rows_ = 0;
  size_t last_acc_ = 0;
};

// h [n, n] (upper triangle, rows i ≤ cols j) += xᵀ·x for x [m, n] f32, multithreaded on `pool`.
// Exposed for tests.
void hessian_accumulate(float* h, int64_t n, const float* x, int64_t m, ThreadPool& pool);

}  // namespace hearth
