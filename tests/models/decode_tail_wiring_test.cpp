// The models' side of Backend::decode_tail, checked on the CPU (which declines the op, so
// without this only a GPU run would exercise the arguments the models pass). A test backend
// forwards every op to the CPU backend and takes decode_tail by running the three ops it
// stands for itself (linear_residual, linear_glu with the FFN norm, linear_residual), as the
// model would have. Every fixture must then give the same logits bit for bit as with the plain
// CPU backend over a prefill and several decode steps: a wrong tensor, norm, epsilon, offset or
// activation in the call would change them. The dense llama-family and Qwen3.5 fixtures must
// take the op on every decode step.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "fixture.h"
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/llama.h"
#include "models/model.h"
#include "models/qwen3_5.h"

namespace hearth {
namespace {

// Every op to `inner`; decode_tail composed from the inner backend's ops.
class TailComposingBackend final : public Backend {
 public:
  explicit TailComposingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  int64_t tails = 0;  // decode_tail calls taken

  std::string name() const override { return "tail-composing " + in_->name(); }
  Device device() const override { return in_->device(); }
  DType activation_dtype() const override { return in_->activation_dtype(); }
  DeviceBuffer alloc(size_t bytes) override { return in_->alloc(bytes); }
  Tensor prepare_weight(const Tensor& host) override { return in_->prepare_weight(host); }
  void copy(const Tensor& dst, const Tensor& src) override { in_->copy(dst, src); }
  void copy_from_host(const Tensor& dst, const void* src) override {
    in_->copy_from_host(dst, src);
  }
  void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) override {
    in_->linear(y, x, w, bias);
  }
  void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float s) override {
    in_->embedding(y, table, ids, s);
  }
  void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps,
                float offset) override {
    in_->rms_norm(y, x, w, eps, offset);
  }
  void rope(const Tensor& x, const int32_t* positions, const RopeParams& rope) override {
    in_->rope(x, positions, rope);
  }
  void kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                const int32_t* positions) override {
    in_->kv_store(kv, k, v, positions);
  }
  void attention(const Tensor& out, const Tensor& q, const KvView& kv, const int32_t* positions,
                 const AttentionParams& p) override {
    in_->attention(out, q, kv, positions, p);
  }
  void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) override {
    in_->glu(y, gate, up, act);
  }
  void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale) override {
    in_->add(y, a, b, b_scale);
  }
  void scale(const Tensor& x, float s) override { in_->scale(x, s); }
  void softcap(const Tensor& x, float c) override { in_->softcap(x, c); }
  void to_host_f32(float* dst, const Tensor& src) override { in_->to_host_f32(dst, src); }
  void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                          const Tensor& w) override {
    in_->conv1d_causal_silu(y, x, state, w);
  }
  void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias) override {
    in_->gated_delta_gates(g, beta, a, b, a_log, dt_bias);
  }
  void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g, const Tensor& beta,
                   const Tensor& state, const GatedDeltaParams& p) override {
    in_->gated_delta(out, qkv, g, beta, state, p);
  }
  void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                      float eps) override {
    in_->rms_norm_gated(y, x, w, z, eps);
  }
  void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) override {
    in_->mul_sigmoid(y, x, gate);
  }
  void fill(const Tensor& y, float value) override { in_->fill(y, value); }
  void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) override {
    in_->gather_rows(y, x, rows);
  }
  void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                        const float* weights) override {
    in_->scatter_add_rows(y, x, rows, weights);
  }
  int64_t moe_experts(const Tensor& y, const Tensor& x, const Tensor& logits, const MoeExperts& e,
                      const MoeScratch& s) override {
    return in_->moe_experts(y, x, logits, e, s);
  }
  int64_t moe_scratch_rows(int64_t n_tokens, int64_t k) const override {
    return in_->moe_scratch_rows(n_tokens, k);
  }
  void gated_delta_mixer(const Tensor& normed, const Tensor& qkv, const Tensor& conv_state,
                         const Tensor& conv_w, const Tensor& a, const Tensor& b,
                         const Tensor& a_log, const Tensor& dt_bias, const Tensor& state,
                         const GatedDeltaParams& p, const Tensor& norm_w, const Tensor& z,
                         float eps, const GatedDeltaScratch& s) override {
    in_->gated_delta_mixer(normed, qkv, conv_state, conv_w, a, b, a_log, dt_bias, state, p, norm_w,
                           z, eps, s);
  }
  void linear_many(const Tensor& x, const LinearOut* outs, int n, const InputNorm* norm) override {
    in_->linear_many(x, outs, n, norm);
  }
  void linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x, const LinearOut& gate,
                  const LinearOut& up, Activation act, const InputNorm* norm) override {
    in_->linear_glu(y, up_scratch, x, gate, up, act, norm);
  }
  void linear_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                       float scale) override {
    in_->linear_residual(x, in, proj, scale);
  }
  void qk_norm_rope_store(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& q_norm,
                          const Tensor& k_norm, float eps, float offset, const RopeParams* rope,
                          const KvView& kv, const int32_t* positions) override {
    in_->qk_norm_rope_store(q, k, v, q_norm, k_norm, eps, offset, rope, kv, positions);
  }
  bool decode_layers(const DecodeLayers& step) override { return in_->decode_layers(step); }
  void pick_token(int32_t* dst, const Tensor& logits, const TokenPick& pick) override {
    in_->pick_token(dst, logits, pick);
  }
  void begin_step(int64_t n_tokens) override { in_->begin_step(n_tokens); }
  void end_step() override { in_->end_step(); }

  // The three ops the op stands for, on scratch of this call's sizes.
  bool decode_tail(const DecodeTail& t) override {
    const int64_t H = t.x.numel(), I = t.gate.shape[0];
    const DType A = t.x.dtype;
    if (scratch_h_ < H || scratch_i_ < I) {
      proj_ = in_->alloc(size_t(H) * dtype_size(A));
      normed_ = in_->alloc(size_t(H) * dtype_size(A));
      gate_ = in_->alloc(size_t(I) * dtype_size(A));
      up_ = in_->alloc(size_t(I) * dtype_size(A));
      scratch_h_ = H;
      scratch_i_ = I;
    }
    const Tensor proj = proj_.view(A, {1, H}), normed = normed_.view(A, {1, H});
    const Tensor gate = gate_.view(A, {1, I}), up = up_.view(A, {1, I});
    in_->linear_residual(t.x, t.in, {proj, t.o, Tensor()}, 1.0f);
    const InputNorm norm{t.ffn_norm, t.eps, t.norm_offset, normed};
    in_->linear_glu(gate, up, t.x, {gate, t.gate, Tensor()}, {up, t.up, Tensor()}, t.act, &norm);
    in_->linear_residual(t.x, gate, {proj, t.down, Tensor()}, 1.0f);
    ++tails;
    return true;
  }

 private:
  std::unique_ptr<Backend> in_;
  DeviceBuffer proj_, normed_, gate_, up_;
  int64_t scratch_h_ = 0, scratch_i_ = 0;
};

bool is_one_of(const std::string& type, const std::vector<std::string>& types) {
  for (const auto& t : types)
    if (t == type) return true;
  return false;
}

TEST(DecodeTailWiring, ComposedTailGivesTheSameLogits) {
  int64_t llama_tails = 0, qwen35_tails = 0;
  for (const test::FixtureCase& c : test::fixture_cases({})) {
    const bool qwen35 = is_one_of(c.model_type, qwen3_5_model_types());
    if (!qwen35 && !is_one_of(c.model_type, llama_model_types())) continue;
    LoadOptions o;
    o.device = "cpu";
    auto plain = load_model(c.dir, o);
    auto composing = std::make_unique<TailComposingBackend>(make_cpu_backend());
    TailComposingBackend* backend = composing.get();
    const ModelConfig config = ModelConfig::load(c.dir);
    auto taking = qwen35
                      ? make_qwen3_5_model(config, WeightStore::open(c.dir), std::move(composing))
                      : make_llama_model(config, WeightStore::open(c.dir), std::move(composing));
    const int64_t V = plain->info().n_vocab;
    std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
    auto sa = plain->new_sequence(), sb = taking->new_sequence();
    const std::vector<int32_t> prompt = {1, 5, 9, 2, 7};
    plain->forward(*sa, prompt, LogitsRows::Last, a.data());
    taking->forward(*sb, prompt, LogitsRows::Last, b.data());
    ASSERT_EQ(a, b) << c.name << ": prefill";
    constexpr int kSteps = 4;
    for (int step = 0; step < kSteps; ++step) {
      const int32_t next = int32_t((step * 13 + 3) % V);
      plain->forward(*sa, std::span<const int32_t>(&next, 1), LogitsRows::Last, a.data());
      taking->forward(*sb, std::span<const int32_t>(&next, 1), LogitsRows::Last, b.data());
      ASSERT_EQ(a, b) << c.name << ": decode step " << step << " (" << backend->tails
                      << " tails taken)";
    }
    (qwen35 ? qwen35_tails : llama_tails) += backend->tails;
  }
  // Most llama-family fixtures have plain layer ends (gemma's post norms do not), and the dense
  // Qwen3.5 ones take it in every layer.
  EXPECT_GT(llama_tails, 0);
  EXPECT_GT(qwen35_tails, 0);
}

}  // namespace
}  // namespace hearth
