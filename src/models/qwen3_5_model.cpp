// The Qwen3.5-family forward: per layer h = x + mixer(norm(x)); x = h + mlp(norm(h)), where the
// mixer is a Gated DeltaNet or a gated full-attention layer and the MLP dense or MoE.
// Prefill (several tokens in one call) runs the chunked delta rule; single tokens run the
// recurrence. HEARTH_GDN_PREFILL=recurrent (read at load) makes prefill use the recurrence too,
// for benchmarks and cross-checks. Scratch is sized for the largest call seen and reused.
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "models/qwen3_5.h"
#include "models/qwen3_5_weights.h"

namespace hearth {

namespace {

class Qwen35Model final : public Model {
 public:
  Qwen35Model(const ModelConfig& config, WeightStore weights, std::unique_ptr<Backend> backend)
      : d_(qwen3_5_descriptor_from_config(config)),
        store_(std::move(weights)),
        backend_(std::move(backend)),
        act_(backend_->activation_dtype()) {
    if (act_ != DType::F32)
      fail("{}: the Qwen3.5 family runs on f32 activations only for now (backend {})",
           config.source(), backend_->name());
    w_ = qwen3_5_load_weights(store_, d_, *backend_);
    store_.audit();
    const char* mode = std::getenv("HEARTH_GDN_PREFILL");
    if (mode && std::string(mode) == "recurrent") chunked_prefill_ = false;
    else if (mode && *mode && std::string(mode) != "chunked")
      fail("HEARTH_GDN_PREFILL must be 'chunked' or 'recurrent', got '{}'", mode);
    info_.model_type = config.wrapper_model_type();
    info_.architecture = "qwen3.5 hybrid (" + d_.model_type + ", " +
                         std::to_string(d_.n_layer - d_.n_full_layers()) + " linear / " +
                         std::to_string(d_.n_full_layers()) + " full-attention layers" +
                         (d_.moe.n_expert > 0 ? ", MoE " + std::to_string(d_.moe.n_expert) + "×top-" +
                                                    std::to_string(d_.moe.n_expert_used)
                                              : std::string()) +
                         ")";
    info_.n_vocab = d_.n_vocab;
    info_.n_embd = d_.n_embd;
    info_.n_layer = d_.n_layer;
    info_.n_ctx_train = d_.n_ctx_train;
    info_.n_params = store_.total_params();
    info_.weight_bytes = store_.total_bytes();
    for (auto [dtype, bytes] : store_.bytes_by_dtype())
      info_.dtypes += (info_.dtypes.empty() ? "" : ", ") + std::string(dtype_name(dtype)) + ": " +
                      std::to_string(bytes) + " bytes";
    info_.eos_token_ids = config.eos_token_ids();
    float scale = 1.0f;
    inv_freq_ = d_.rope.inv_freq(d_.n_ctx_train, &scale);
    rope_scale_ = scale;
  }

  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence() const override {
    return std::make_unique<Qwen35Sequence>(*backend_, d_);
  }
  void forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
               float* logits) override;

 private:
  void reserve_scratch(int64_t n);
  void attention_block(int il, Qwen35Sequence& seq, int64_t n);
  void linear_block(int il, Qwen35Sequence& seq, int64_t n);
  void mlp_block(int il, int64_t n);

  Qwen35Descriptor d_;
  WeightStore store_;  // owns the mappings every weight view points into
  std::unique_ptr<Backend> backend_;
  DType act_ = DType::F32;
  Qwen35Weights w_;
  ModelInfo info_;
  bool chunked_prefill_ = true;
  std::vector<float> inv_freq_;
  float rope_scale_ = 1.0f;
  MoeBlock moe_;

  int64_t scratch_tokens_ = 0;
  // Scratch in the backend's memory.
  DeviceBuffer x_, h_, o_, q_, gate_, k_, v_, attn_;       // attention
  DeviceBuffer qkv_, conv_, z_, a_, b_, g_, beta_, core_;  // linear attention
  DeviceBuffer ff_gate_, ff_up_;                           // dense MLP
  std::vector<int32_t> positions_;
};

void Qwen35Model::reserve_scratch(int64_t n) {
  if (n <= scratch_tokens_) return;
  auto rows = [&](int64_t cols) {
    return backend_->alloc(size_t(n * std::max<int64_t>(cols, 1)) * dtype_size(act_));
  };
  const int64_t H = d_.n_embd, nq = d_.n_head * d_.head_dim, nkv = d_.n_head_kv * d_.head_dim;
  x_ = (rows(H));
  h_ = (rows(H));
  o_ = (rows(H));
  q_ = (rows(nq));
  gate_ = (rows(nq));
  attn_ = (rows(nq));
  k_ = (rows(nkv));
  v_ = (rows(nkv));
  if (d_.n_full_layers() < d_.n_layer) {
    const int64_t C = d_.conv_dim(), Hv = d_.lin_v_heads, vd = Hv * d_.lin_v_dim;
    qkv_ = (rows(C));
    conv_ = (rows(C));
    z_ = (rows(vd));
    core_ = (rows(vd));
    a_ = (rows(Hv));
    b_ = (rows(Hv));
    g_ = (rows(Hv));
    beta_ = (rows(Hv));
  }
  if (d_.n_ff > 0) {
    ff_gate_ = (rows(d_.n_ff));
    ff_up_ = (rows(d_.n_ff));
  }
  scratch_tokens_ = n;
}

void Qwen35Model::attention_block(int il, Qwen35Sequence& seq, int64_t n) {
  const Qwen35Layer& L = w_.layers[size_t(il)];
  const int64_t D = d_.head_dim, nq = d_.n_head * D;
  Backend& be = *backend_;
  const Tensor h = h_.view(act_, {n, d_.n_embd});
  const Tensor q = q_.view(act_, {n, d_.n_head, D});
  const Tensor k = k_.view(act_, {n, d_.n_head_kv, D});
  const Tensor v = v_.view(act_, {n, d_.n_head_kv, D});
  const Tensor attn = attn_.view(act_, {n, d_.n_head, D});
  be.linear(q, h, L.q.w, L.q.bias);
  be.linear(k, h, L.k.w, L.k.bias);
  be.linear(v, h, L.v.w, L.v.bias);
  be.rms_norm(q, q, L.q_norm, d_.norm_eps, w_.norm_offset);
  be.rms_norm(k, k, L.k_norm, d_.norm_eps, w_.norm_offset);
  const RopeParams rp{inv_freq_.data(), d_.rope.rotary_dim, rope_scale_};
  be.rope(q, positions_.data(), rp);
  be.rope(k, positions_.data(), rp);
  const KvView kv = seq.kv().view(seq.kv_index(il));
  be.kv_store(kv, k, v, positions_.data());
  AttentionParams ap;
  ap.n_head = int(d_.n_head);
  ap.n_head_kv = int(d_.n_head_kv);
  ap.head_dim = int(D);
  ap.scale = 1.0f / std::sqrt(float(D));
  be.attention(attn, q, kv, positions_.data(), ap);
  const Tensor attn2 = attn.reshaped({n, nq});
  if (d_.attn_output_gate) {
    const Tensor gate = gate_.view(act_, {n, nq});
    be.linear(gate, h, L.gate.w, L.gate.bias);
    be.mul_sigmoid(attn2, attn2, gate);
  }
  be.linear(o_.view(act_, {n, d_.n_embd}), attn2, L.o.w, L.o.bias);
}

void Qwen35Model::linear_block(int il, Qwen35Sequence& seq, int64_t n) {
  const Qwen35Layer& L = w_.layers[size_t(il)];
  const int64_t C = d_.conv_dim(), Hv = d_.lin_v_heads, Dv = d_.lin_v_dim;
  Backend& be = *backend_;
  const Tensor h = h_.view(act_, {n, d_.n_embd});
  const Tensor qkv = qkv_.view(act_, {n, C});
  const Tensor conv = conv_.view(act_, {n, C});
  const Tensor z = z_.view(act_, {n, Hv * Dv});
  const Tensor a = a_.view(act_, {n, Hv});
  const Tensor b = b_.view(act_, {n, Hv});
  const Tensor g = g_.view(act_, {n, Hv});
  const Tensor beta = beta_.view(act_, {n, Hv});
  const Tensor core = core_.view(act_, {n, Hv * Dv});
  be.linear(qkv, h, L.in_qkv, Tensor());
  be.linear(z, h, L.in_z, Tensor());
  be.linear(b, h, L.in_b, Tensor());
  be.linear(a, h, L.in_a, Tensor());
  const int li = seq.lin_index(il);
  be.conv1d_causal_silu(conv, qkv, seq.conv_state(li), L.conv_w);
  be.gated_delta_gates(g, beta, a, b, L.a_log, L.dt_bias);
  GatedDeltaParams p;
  p.n_k_heads = int(d_.lin_k_heads);
  p.n_v_heads = int(Hv);
  p.k_dim = int(d_.lin_k_dim);
  p.v_dim = int(Dv);
  p.chunked = chunked_prefill_ && n > 1;
  be.gated_delta(core, conv, g, beta, seq.recurrent_state(li), p);
  be.rms_norm_gated(core, core, L.lin_norm, z, d_.norm_eps);
  be.linear(o_.view(act_, {n, d_.n_embd}), core, L.out_proj, Tensor());
}

void Qwen35Model::mlp_block(int il, int64_t n) {
  const Qwen35Layer& L = w_.layers[size_t(il)];
  Backend& be = *backend_;
  const Tensor h = h_.view(act_, {n, d_.n_embd});
  const Tensor o = o_.view(act_, {n, d_.n_embd});
  if (d_.moe_layer[size_t(il)]) {
    moe_.forward(be, o, h, L.moe, d_.moe);
    return;
  }
  const Tensor gate = ff_gate_.view(act_, {n, d_.n_ff});
  const Tensor up = ff_up_.view(act_, {n, d_.n_ff});
  be.linear(gate, h, L.mlp_gate, Tensor());
  be.linear(up, h, L.mlp_up, Tensor());
  be.glu(gate, gate, up, d_.act);
  be.linear(o, gate, L.mlp_down, Tensor());
}

void Qwen35Model::forward(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
                          float* logits) {
  auto& seq = static_cast<Qwen35Sequence&>(state);
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  for (int32_t t : tokens)
    if (t < 0 || t >= d_.n_vocab) fail("token id {} is out of range [0, {})", t, d_.n_vocab);
  reserve_scratch(n);
  const int64_t start = seq.n_past();
  positions_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) positions_[size_t(i)] = int32_t(start + i);

  Backend& be = *backend_;
  const int64_t H = d_.n_embd;
  const Tensor x = x_.view(act_, {n, H});
  const Tensor h = h_.view(act_, {n, H});
  const Tensor o = o_.view(act_, {n, H});
  be.embedding(x, w_.embed, tokens.data(), 1.0f);
  seq.kv().reserve_batch(n);
  for (int il = 0; il < int(d_.n_layer); ++il) {
    const Qwen35Layer& L = w_.layers[size_t(il)];
    be.rms_norm(h, x, L.attn_norm, d_.norm_eps, w_.norm_offset);
    if (d_.linear_layer[size_t(il)]) linear_block(il, seq, n);
    else attention_block(il, seq, n);
    be.add(x, x, o);
    be.rms_norm(h, x, L.ffn_norm, d_.norm_eps, w_.norm_offset);
    mlp_block(il, n);
    be.add(x, x, o);
  }
  seq.kv().commit_batch();
  if (rows == LogitsRows::None) return;
  const int64_t first = rows == LogitsRows::Last ? n - 1 : 0;
  const Tensor hl = h.slice_rows(first, n);
  be.rms_norm(hl, x.slice_rows(first, n), w_.final_norm, d_.norm_eps, w_.norm_offset);
  be.linear(Tensor(logits, act_, {n - first, d_.n_vocab}), hl, w_.lm_head, Tensor());
}

}  // namespace

std::unique_ptr<Model> make_qwen3_5_model(const ModelConfig& config, WeightStore weights,
                                          std::unique_ptr<Backend> backend) {
  return std::make_unique<Qwen35Model>(config, std::move(weights), std::move(backend));
}

}  // namespace hearth
