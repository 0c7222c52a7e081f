// The Qwen3.5-family forward: per layer h = x + mixer(norm(x)); x = h + mlp(norm(h)), where the
// mixer is a Gated DeltaNet or a gated full-attention layer and the MLP dense or MoE.
// Prefill (several tokens in one call) runs the chunked delta rule; single tokens run the
// recurrence. LoadOptions::gdn_recurrent_prefill makes prefill use the recurrence too, for
// benchmarks and cross-checks. Scratch is sized for the largest call seen and reused.
// Built with a TensorShard of world N > 1 it is one rank of a tensor-parallel model
// (tensor_parallel.h): its share of the attention and Gated DeltaNet heads, MLP channels,
// experts (expert parallelism) and vocabulary; the row-parallel products (o, out_proj, down, the
// MoE block) and the embedding all-reduced, the logits its vocabulary columns only.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "models/model_common.h"
#include "models/qwen3_5.h"
#include "models/qwen3_5_weights.h"
#include "models/step_model.h"

namespace hearth {

namespace {

class Qwen35Model final : public StepModel {
 public:
  Qwen35Model(const ModelConfig& config, WeightStore weights, std::unique_ptr<Backend> backend,
              const LoadOptions& options, TensorShard shard)
      : d_(qwen3_5_descriptor_from_config(config)),
        shard_(shard),
        store_(std::move(weights)),
        backend_(std::move(backend)),
        act_(backend_->activation_dtype()),
        // The chunked delta rule sums in another order than the recurrence: a deterministic
        // model prefills through the recurrence, as it decodes.
        chunked_prefill_(!options.gdn_recurrent_prefill && !options.deterministic) {
    if (shard_.world > 1) {
      check_qwen3_5_tensor_parallel(d_, shard_.world);
      if (act_ != DType::F32)
        fail("tensor parallelism runs on the CPU backend only (f32 activations)");
    }
    // The whole model's shapes to read the checkpoint; from then on this rank's (the same when
    // world is 1).
    sh_ = qwen3_5_shard(d_, shard_.rank, shard_.world);
    w_ = qwen3_5_load_weights(store_, d_, sh_, *backend_);
    d_ = qwen3_5_rank_descriptor(d_, sh_);
    store_.audit();
    info_ = decoder_info(config, store_, d_, d_.n_full_layers(), act_);
    info_.model_type = config.wrapper_model_type();
    info_.architecture = "qwen3.5 hybrid (" + d_.model_type + ", " +
                         std::to_string(d_.n_layer - d_.n_full_layers()) + " linear / " +
                         std::to_string(d_.n_full_layers()) + " full-attention layers" +
                         (d_.moe.n_expert > 0 ? ", MoE " + std::to_string(d_.moe.n_expert) +
                                                    "×top-" + std::to_string(d_.moe.n_expert_used)
                                              : std::string()) +
                         ")";
    set_decode_work(info_, store_, w_.embed, w_.lm_head, unread_in_decode());
    head_ = {.norm = w_.final_norm,
             .eps = d_.norm_eps,
             .norm_offset = w_.norm_offset,
             .weight = w_.lm_head,
             .n_vocab = sh_.vocab.size()};
    one_kernel_stack_ = shard_.world == 1 && one_kernel_stack();
    float scale = 1.0f;
    inv_freq_ = d_.rope.inv_freq(d_.n_ctx_train, &scale);
    rope_scale_ = scale;
  }

  const ModelInfo& info() const override { return info_; }
  const WeightStore* weight_store() const override { return &store_; }
  std::unique_ptr<SequenceState> new_sequence() const override {
    return std::make_unique<Qwen35Sequence>(*backend_, d_);
  }
  void forward_batch(std::span<const BatchItem> items) override;

 private:
  using SequenceRows = SequenceRowsOf<Qwen35Sequence>;
  Backend& step_backend() const override { return *backend_; }
  void run(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows, float* logits,
           const TokenPick* pick, int32_t* token) override;
  void reserve_scratch(int64_t n);
  std::vector<UnreadWeight> unread_in_decode() const;
  bool one_kernel_stack() const;
  bool decode_layers(Qwen35Sequence& seq, const Tensor& x, int32_t position);
  // The products take all n rows; RoPE, the K/V store, attention and the Gated DeltaNet
  // recurrence run per sequence, on its own state.
  void attention_block(int il, std::span<const SequenceRows> parts, int64_t n);
  void linear_block(int il, std::span<const SequenceRows> parts, int64_t n);
  void layers(std::span<const SequenceRows> parts, int64_t n);
  void mlp_block(int il, int64_t n);
  void residual_product(const Tensor& x, const Tensor& in, const Backend::LinearOut& proj);
  void embed_tokens(const Tensor& x, std::span<const int32_t> tokens);
  void all_reduce(const Tensor& t);

  Qwen35Descriptor d_;  // this rank's shapes (qwen3_5_rank_descriptor): the whole model's at N = 1
  TensorShard shard_;
  Qwen35Shard sh_;     // this rank's heads, channels, experts and vocabulary rows
  WeightStore store_;  // owns the mappings every weight view points into
  std::unique_ptr<Backend> backend_;
  DType act_ = DType::F32;
  bool chunked_prefill_ = true;
  Qwen35Weights w_;
  ModelInfo info_;
  OutputHead head_;
  std::vector<float> inv_freq_;
  float rope_scale_ = 1.0f;
  MoeBlock moe_;
  bool one_kernel_stack_ = false;  // one_kernel_stack(), at load
  std::vector<Backend::DecodeLayer> step_layers_;
  // linear_block's states of a run of one-row parts.
  std::vector<Tensor> row_conv_states_, row_states_;

  int64_t scratch_tokens_ = 0;
  // Scratch in the backend's memory.
  DeviceBuffer x_, h_, o_, q_, gate_, k_, v_, attn_;                  // attention
  DeviceBuffer qkv_, conv_, z_, a_, b_, g_, beta_, core_, core_act_;  // linear attention
  DeviceBuffer ff_gate_, ff_up_;                                      // dense MLP
};

// The weights a decode step takes but does not read (ModelInfo's decode work): the MTP head
// (kept for speculative decoding, not run) and, in MoE layers, the experts a token is not
// routed to.
std::vector<UnreadWeight> Qwen35Model::unread_in_decode() const {
  std::vector<UnreadWeight> unread;
  for (const auto& [name, t] : w_.mtp) unread.push_back({t, 1});
  const int64_t idle = d_.moe.n_expert - std::min(d_.moe.n_expert_used, d_.moe.n_expert);
  for (const Qwen35Layer& L : w_.layers) {
    // A rank of a tensor-parallel model holds experts from held_begin (maybe none).
    const size_t first = size_t(std::max<int64_t>(L.moe.held_begin, 0));
    if (first >= L.moe.gate.size() || L.moe.gate[first].empty() || idle <= 0) continue;
    for (const Tensor& expert : {L.moe.gate[first], L.moe.up[first], L.moe.down[first]})
      unread.push_back({expert, idle});
  }
  return unread;
}

// The stacks Backend::decode_layers describes: dense MLPs, no biases on the attention
// products. (The norms, q/k norms and output gates are those of every Qwen3.5 checkpoint.)
bool Qwen35Model::one_kernel_stack() const {
  if (d_.n_ff <= 0) return false;
  for (int il = 0; il < int(d_.n_layer); ++il) {
    const Qwen35Layer& L = w_.layers[size_t(il)];
    if (d_.moe_layer[size_t(il)] || L.mlp_gate.empty()) return false;
    if (d_.linear_layer[size_t(il)]) continue;
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate})
      if (!l->bias.empty()) return false;
  }
  return true;
}

// A one-token step's layers in one backend call, where the backend takes it.
bool Qwen35Model::decode_layers(Qwen35Sequence& seq, const Tensor& x, int32_t position) {
  if (!one_kernel_stack_) return false;
  step_layers_.resize(size_t(d_.n_layer));
  for (int il = 0; il < int(d_.n_layer); ++il) {
    const Qwen35Layer& L = w_.layers[size_t(il)];
    Backend::DecodeLayer& s = step_layers_[size_t(il)];
    s = Backend::DecodeLayer{};
    s.attn_norm = L.attn_norm;
    s.ffn_norm = L.ffn_norm;
    s.gate = L.mlp_gate;
    s.up = L.mlp_up;
    s.down = L.mlp_down;
    if (d_.linear_layer[size_t(il)]) {
      const int li = seq.lin_index(il);
      s.o = L.out_proj;
      s.in_qkv = L.in_qkv;
      s.in_z = L.in_z;
      s.in_b = L.in_b;
      s.in_a = L.in_a;
      s.conv_w = L.conv_w;
      s.a_log = L.a_log;
      s.dt_bias = L.dt_bias;
      s.lin_norm = L.lin_norm;
      s.conv_state = seq.conv_state(li);
      s.state = seq.recurrent_state(li);
    } else {
      s.q = L.q.w;
      s.k = L.k.w;
      s.v = L.v.w;
      s.o = L.o.w;
      s.q_norm = L.q_norm;
      s.k_norm = L.k_norm;
      if (d_.attn_output_gate) s.out_gate = L.gate.w;
      s.kv = seq.kv().view(seq.kv_index(il));
    }
  }
  Backend::DecodeLayers step = decode_step(step_layers_, d_, x, position);
  step.eps = d_.norm_eps;
  step.norm_offset = w_.norm_offset;
  step.attn_scale = 1.0f / std::sqrt(float(d_.head_dim));
  step.rope = {inv_freq_.data(), d_.rope.rotary_dim, rope_scale_};
  step.act = d_.act;
  step.gdn.n_k_heads = int(d_.lin_k_heads);
  step.gdn.n_v_heads = int(d_.lin_v_heads);
  step.gdn.k_dim = int(d_.lin_k_dim);
  step.gdn.v_dim = int(d_.lin_v_dim);
  return backend_->decode_layers(step);
}

void Qwen35Model::reserve_scratch(int64_t n) {
  if (n <= scratch_tokens_) return;
  auto rows = [&](int64_t cols, DType dt) {
    return backend_->alloc(size_t(n * std::max<int64_t>(cols, 1)) * dtype_size(dt));
  };
  // Activations in the backend's dtype, except inside Gated DeltaNet, which stays f32 from the
  // input projections to the gated norm (the gates by the op's contract; q/k/v, z and the core
  // output because the delta rule carries their rounding into its state: in bf16 the fixtures'
  // logits drifted 0.1-1 std from the reference on the GPU). The norm writes the out
  // projection's input back in the activation dtype (core_act_).
  const DType A = act_, F = DType::F32;
  const int64_t H = d_.n_embd, nq = d_.n_head * d_.head_dim, nkv = d_.n_head_kv * d_.head_dim;
  x_ = rows(H, A);
  h_ = rows(H, A);
  o_ = rows(H, A);
  q_ = rows(nq, A);
  gate_ = rows(nq, A);
  attn_ = rows(nq, A);
  k_ = rows(nkv, A);
  v_ = rows(nkv, A);
  if (d_.n_full_layers() < d_.n_layer) {
    const int64_t C = d_.conv_dim(), Hv = d_.lin_v_heads, vd = Hv * d_.lin_v_dim;
    qkv_ = rows(C, F);
    conv_ = rows(C, F);
    z_ = rows(vd, F);
    core_ = rows(vd, F);
    if (A != F) core_act_ = rows(vd, A);
    a_ = rows(Hv, F);
    b_ = rows(Hv, F);
    g_ = rows(Hv, F);
    beta_ = rows(Hv, F);
  }
  if (d_.n_ff > 0) {
    ff_gate_ = rows(d_.n_ff, A);
    ff_up_ = rows(d_.n_ff, A);
  }
  scratch_tokens_ = n;
}

void Qwen35Model::attention_block(int il, std::span<const SequenceRows> parts, int64_t n) {
  const Qwen35Layer& L = w_.layers[size_t(il)];
  const int64_t D = d_.head_dim, nq = d_.n_head * D;
  Backend& be = *backend_;
  const Tensor x = x_.view(act_, {n, d_.n_embd});
  // The input norm happens inside the products (h is only the composed form's scratch).
  const Backend::InputNorm norm{L.attn_norm, d_.norm_eps, w_.norm_offset,
                                h_.view(act_, {n, d_.n_embd})};
  const Tensor q = q_.view(act_, {n, d_.n_head, D});
  const Tensor k = k_.view(act_, {n, d_.n_head_kv, D});
  const Tensor v = v_.view(act_, {n, d_.n_head_kv, D});
  const Tensor attn = attn_.view(act_, {n, d_.n_head, D});
  const Tensor gate = gate_.view(act_, {n, nq});
  // q, k, v and the output gate: four products of the normalised x, one launch on a GPU.
  const Backend::LinearOut proj[] = {{q, L.q.w, L.q.bias},
                                     {k, L.k.w, L.k.bias},
                                     {v, L.v.w, L.v.bias},
                                     {gate, L.gate.w, L.gate.bias}};
  be.linear_many(x, proj, d_.attn_output_gate ? 4 : 3, &norm);
  const RopeParams rp{inv_freq_.data(), d_.rope.rotary_dim, rope_scale_};
  AttentionParams ap;
  ap.n_head = int(d_.n_head);
  ap.n_head_kv = int(d_.n_head_kv);
  ap.head_dim = int(D);
  ap.scale = 1.0f / std::sqrt(float(D));
  attend_parts(be, parts, q, k, v, attn, L.q_norm, L.k_norm, d_.norm_eps, w_.norm_offset, &rp, ap,
               [il](Qwen35Sequence& s) { return s.kv().view(s.kv_index(il)); });
  const Tensor attn2 = attn.reshaped({n, nq});
  if (d_.attn_output_gate) be.mul_sigmoid(attn2, attn2, gate);
  residual_product(x, attn2, {o_.view(act_, {n, d_.n_embd}), L.o.w, L.o.bias});
}

void Qwen35Model::linear_block(int il, std::span<const SequenceRows> parts, int64_t n) {
  const Qwen35Layer& L = w_.layers[size_t(il)];
  const int64_t C = d_.conv_dim(), Hv = d_.lin_v_heads, Dv = d_.lin_v_dim;
  Backend& be = *backend_;
  const Tensor x = x_.view(act_, {n, d_.n_embd});
  const Backend::InputNorm norm{L.attn_norm, d_.norm_eps, w_.norm_offset,
                                h_.view(act_, {n, d_.n_embd})};
  const Tensor qkv = qkv_.view(DType::F32, {n, C});
  const Tensor conv = conv_.view(DType::F32, {n, C});
  const Tensor z = z_.view(DType::F32, {n, Hv * Dv});
  const Tensor a = a_.view(DType::F32, {n, Hv});
  const Tensor b = b_.view(DType::F32, {n, Hv});
  const Tensor g = g_.view(DType::F32, {n, Hv});
  const Tensor beta = beta_.view(DType::F32, {n, Hv});
  const Tensor core = core_.view(DType::F32, {n, Hv * Dv});
  const Tensor normed = act_ == DType::F32 ? core : core_act_.view(act_, {n, Hv * Dv});
  const Backend::LinearOut proj[] = {{qkv, L.in_qkv, Tensor()},
                                     {z, L.in_z, Tensor()},
                                     {b, L.in_b, Tensor()},
                                     {a, L.in_a, Tensor()}};
  be.linear_many(x, proj, 4, &norm);
  GatedDeltaParams gp;
  gp.n_k_heads = int(d_.lin_k_heads);
  gp.n_v_heads = int(Hv);
  gp.k_dim = int(d_.lin_k_dim);
  gp.v_dim = int(Dv);
  // conv → gates → delta rule → gated norm (one kernel for decode tokens on the GPU): a run of
  // one-row parts (decode tokens of different sequences) in one call, prompt chunks one by one.
  for (size_t i = 0; i < parts.size();) {
    size_t j = i;
    while (j < parts.size() && parts[j].rows == 1) ++j;
    if (j - i < 2) j = i + 1;
    const int64_t f = parts[i].first, e = parts[j - 1].first + parts[j - 1].rows;
    if (j - i == 1) {
      Qwen35Sequence& seq = *parts[i].seq;
      const int li = seq.lin_index(il);
      // Rows [s, t) of the chunk, carrying the sequence's conv and recurrent states on.
      auto mix = [&](int64_t s, int64_t t) {
        gp.chunked = chunked_prefill_ && t - s > 1;
        const Backend::GatedDeltaScratch part{conv.slice_rows(s, t), g.slice_rows(s, t),
                                              beta.slice_rows(s, t), core.slice_rows(s, t)};
        be.gated_delta_mixer(normed.slice_rows(s, t), qkv.slice_rows(s, t), seq.conv_state(li),
                             L.conv_w, a.slice_rows(s, t), b.slice_rows(s, t), L.a_log, L.dt_bias,
                             seq.recurrent_state(li), gp, L.lin_norm, z.slice_rows(s, t),
                             d_.norm_eps, part);
      };
      // Checkpoints inside the chunk: the states as they stand after each planned position.
      int64_t from = f;
      const std::vector<int64_t>& planned = seq.planned_checkpoints();
      for (size_t k = 0; k < planned.size(); ++k) {
        const int64_t at = f + planned[k] - seq.n_past();
        if (at <= from || at >= e) continue;
        mix(from, at);
        seq.snapshot_layer(k, li);
        from = at;
      }
      mix(from, e);
    } else {
      gp.chunked = false;
      const Backend::GatedDeltaScratch scratch{conv.slice_rows(f, e), g.slice_rows(f, e),
                                               beta.slice_rows(f, e), core.slice_rows(f, e)};
      row_conv_states_.clear();
      row_states_.clear();
      for (size_t r = i; r < j; ++r) {
        const int li = parts[r].seq->lin_index(il);
        row_conv_states_.push_back(parts[r].seq->conv_state(li));
        row_states_.push_back(parts[r].seq->recurrent_state(li));
      }
      be.gated_delta_mixer_rows(normed.slice_rows(f, e), qkv.slice_rows(f, e),
                                row_conv_states_.data(), L.conv_w, a.slice_rows(f, e),
                                b.slice_rows(f, e), L.a_log, L.dt_bias, row_states_.data(), gp,
                                L.lin_norm, z.slice_rows(f, e), d_.norm_eps, scratch);
    }
    i = j;
  }
  residual_product(x, normed, {o_.view(act_, {n, d_.n_embd}), L.out_proj, Tensor()});
}

void Qwen35Model::mlp_block(int il, int64_t n) {
  const Qwen35Layer& L = w_.layers[size_t(il)];
  Backend& be = *backend_;
  const Tensor x = x_.view(act_, {n, d_.n_embd});
  const Tensor h = h_.view(act_, {n, d_.n_embd});
  const Tensor o = o_.view(act_, {n, d_.n_embd});
  if (d_.moe_layer[size_t(il)]) {
    be.rms_norm(h, x, L.ffn_norm, d_.norm_eps, w_.norm_offset);
    moe_.forward(be, o, h, L.moe, d_.moe);
    all_reduce(o);  // a rank's experts and shared-expert channels: its part of the sum
    be.add(x, x, o);
    return;
  }
  const Tensor gate = ff_gate_.view(act_, {n, d_.n_ff});
  const Tensor up = ff_up_.view(act_, {n, d_.n_ff});
  const Backend::InputNorm norm{L.ffn_norm, d_.norm_eps, w_.norm_offset, h};
  be.linear_glu(gate, up, x, {gate, L.mlp_gate, Tensor()}, {up, L.mlp_up, Tensor()}, d_.act, &norm);
  residual_product(x, gate, {o, L.mlp_down, Tensor()});
}

// x += out(in). A row-parallel rank's product is its part of the sum: all-reduced before the
// add, so every rank adds the same rows to its copy of x.
void Qwen35Model::residual_product(const Tensor& x, const Tensor& in,
                                   const Backend::LinearOut& proj) {
  Backend& be = *backend_;
  if (shard_.world == 1) return be.linear_residual(x, in, proj, 1.0f);
  be.linear(proj.y, in, proj.w, proj.bias);
  all_reduce(proj.y);
  be.add(x, x, proj.y);
}

void Qwen35Model::all_reduce(const Tensor& t) {
  if (shard_.world > 1) shard_.comm->all_reduce_sum(t.as<float>(), size_t(t.numel()));
}

// The input rows. A rank holds only its vocabulary rows: it looks up the tokens that fall in
// them, leaves zeros for the others, and the all-reduce sums the one non-zero row per token.
void Qwen35Model::embed_tokens(const Tensor& x, std::span<const int32_t> tokens) {
  Backend& be = *backend_;
  if (shard_.world == 1) return be.embedding(x, w_.embed, tokens.data(), 1.0f);
  be.fill(x, 0.0f);
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < sh_.vocab.begin || tokens[t] >= sh_.vocab.end) continue;
    const int32_t id = int32_t(tokens[t] - sh_.vocab.begin);
    be.embedding(x.slice_rows(int64_t(t), int64_t(t) + 1), w_.embed, &id, 1.0f);
  }
  all_reduce(x);
}

void Qwen35Model::run(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
                      float* logits, const TokenPick* pick, int32_t* token) {
  auto& seq = static_cast<Qwen35Sequence&>(state);
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  check_tokens(tokens, d_.n_vocab);
  reserve_scratch(n);
  start_step(*backend_, n, seq.n_past());

  Backend& be = *backend_;
  const int64_t H = d_.n_embd;
  const Tensor x = x_.view(act_, {n, H});
  const Tensor h = h_.view(act_, {n, H});
  if (shard_.world == 1)
    embed(be, x, w_.embed, tokens, 1.0f);
  else
    embed_tokens(x, tokens);
  seq.kv().reserve_batch(n);
  // Each block's products end in a residual add into x (linear_residual), and the next block's
  // input norm happens inside its first products (InputNorm): no pass over x in between.
  if (n != 1 || !decode_layers(seq, x, positions_[0])) {
    const SequenceRows one[] = {{&seq, 0, n}};
    layers(one, n);
  }
  seq.kv().commit_batch();
  seq.keep_planned();
  finish_with_logits(be, x, h, rows, head_, logits, pick, token);
}

void Qwen35Model::layers(std::span<const SequenceRows> parts, int64_t n) {
  for (int il = 0; il < int(d_.n_layer); ++il) {
    if (d_.linear_layer[size_t(il)])
      linear_block(il, parts, n);
    else
      attention_block(il, parts, n);
    mlp_block(il, n);
  }
}

// The rows of several sequences through the layers together: each product (and each MoE
// expert) reads its weights once for all of them.
void Qwen35Model::forward_batch(std::span<const BatchItem> items) {
  check_batch(items);
  if (items.size() < 2) return Model::forward_batch(items);
  std::vector<int32_t> tokens;
  const auto parts = batch_rows<Qwen35Sequence>(items, d_.n_vocab, tokens);
  const int64_t n = int64_t(tokens.size());
  reserve_scratch(n);
  // The caches' new blocks come first: an allocation would end a recorded step early.
  for (const SequenceRows& p : parts) p.seq->kv().reserve_batch(p.rows);
  backend_->begin_batch_step(n, int64_t(parts.size()));
  const Tensor x = x_.view(act_, {n, d_.n_embd});
  embed_tokens(x, tokens);
  layers(parts, n);
  for (const SequenceRows& p : parts) {
    p.seq->kv().commit_batch();
    p.seq->keep_planned();
  }
  finish_with_item_logits(*backend_, x, o_, h_, act_, items, head_);
}

}  // namespace

std::unique_ptr<Model> make_qwen3_5_model(const ModelConfig& config, WeightStore weights,
                                          std::unique_ptr<Backend> backend,
                                          const LoadOptions& options) {
  return std::make_unique<Qwen35Model>(config, std::move(weights), std::move(backend), options,
                                       TensorShard{});
}

std::unique_ptr<Model> make_qwen3_5_rank_model(const ModelConfig& config, WeightStore weights,
                                               std::unique_ptr<Backend> backend,
                                               const LoadOptions& options,
                                               const TensorShard& shard) {
  return std::make_unique<Qwen35Model>(config, std::move(weights), std::move(backend), options,
                                       shard);
}

}  // namespace hearth
