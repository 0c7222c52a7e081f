// The llama-family decoder: weights resolved once at load (fused projections split into row
// views, multimodal prefixes stripped), then an eager forward over the backend's ops.
// Scratch activations are sized for the largest batch seen and reused, so steady-state decode
// allocates nothing.
// Built with a TensorShard of world N > 1 it is one rank of a tensor-parallel model
// (tensor_parallel.h): its share of the attention heads, KV heads, MLP channels and vocabulary,
// the row-parallel products (o, down) and the embedding all-reduced, the logits its vocabulary
// columns only.
#include <cstring>

#include "core/error.h"
#include "kv/kv_cache.h"
#include "models/llama.h"
#include "models/model_common.h"
#include "models/step_model.h"
#include "models/weight_shard.h"

namespace hearth {

namespace {

struct LlamaLayer {
  Tensor attn_norm, post_attn_norm, ffn_norm, post_ffn_norm, q_norm, k_norm;
  Linear q, k, v, o, gate, up, down;
};

class LlamaSequence final : public SequenceState {
 public:
  LlamaSequence(Backend& backend, const LlamaDescriptor& d, int64_t n_head_kv)
      : kv(backend, d.window, int(n_head_kv), int(d.head_dim)), rope_max_seq(d.ropes.size()) {
    for (size_t i = 0; i < d.ropes.size(); ++i) rope_max_seq[i] = d.ropes[i].max_position;
  }
  LlamaSequence(KvCache kv_, std::vector<int64_t> rope_max_seq_)
      : kv(std::move(kv_)), rope_max_seq(std::move(rope_max_seq_)) {}
  int64_t n_past() const override { return kv.n_past(); }
  bool truncate(int64_t n) override { return kv.truncate(n); }
  size_t bytes() const override { return kv.bytes(); }
  size_t bytes_after(int64_t n_more) const override { return kv.bytes_after(n_more); }
  std::unique_ptr<SequenceState> share() const override {
    return std::unique_ptr<SequenceState>(new LlamaSequence(kv.share(), rope_max_seq));
  }

  KvCache kv;
  // Dynamic NTK rope: the longest sequence the frequencies were computed for (HF semantics).
  std::vector<int64_t> rope_max_seq;
};

class LlamaModel final : public StepModel {
 public:
  LlamaModel(const ModelConfig& config, WeightStore weights, std::unique_ptr<Backend> backend,
             TensorShard shard)
      : d_(llama_descriptor_from_config(config)),
        weights_(std::move(weights)),
        backend_(std::move(backend)),
        shard_(shard),
        act_(backend_->activation_dtype()) {
    set_shard_sizes();
    load_weights();
    weights_.audit();
    AttentionDims local = d_;  // the KV this rank caches
    local.n_head_kv = n_head_kv_;
    info_ = decoder_info(config, weights_, local, d_.n_layer, act_);
    info_.model_type = d_.model_type;
    info_.architecture = "llama-family decoder (" + d_.model_type + ")";
    set_decode_work(info_, weights_, embed_, lm_head_);
    info_.generates = !headless_;
    head_ = {.norm = final_norm_,
             .eps = d_.norm_eps,
             .norm_offset = d_.norm_offset,
             .weight = lm_head_,
             .n_vocab = vocab_.size(),
             .logits_scale = d_.logits_scale,
             .softcap = d_.final_softcap};
    plain_stack_ = shard_.world == 1 && plain_stack();
  }

  const ModelInfo& info() const override { return info_; }
  const WeightStore* weight_store() const override { return &weights_; }

  std::unique_ptr<SequenceState> new_sequence() const override {
    return std::make_unique<LlamaSequence>(*backend_, d_, n_head_kv_);
  }
  void forward_batch(std::span<const BatchItem> items) override;

 private:
  Backend& step_backend() const override { return *backend_; }
  void run(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows, float* logits,
           const TokenPick* pick, int32_t* token) override;
  void set_shard_sizes();
  void load_weights();
  Linear take_linear(const std::string& name, int64_t out, int64_t in, bool bias);
  Linear prepared(Linear l);
  Linear rows_of(const std::string& name, const Linear& l, ShardRange rows);
  Linear columns_of(const std::string& name, const Linear& l, ShardRange cols, bool keep_bias);
  Tensor take_norm(const std::string& name, int64_t n);
  Tensor gathered_k_gain(const std::string& name);
  void norm_gathered(const Tensor& rows, const Tensor& gain, const DeviceBuffer& scratch);
  void embed_tokens(const Tensor& x, std::span<const int32_t> tokens);
  void all_reduce(const Tensor& t);
  void reserve_scratch(int64_t n_tokens);
  using SequenceRows = SequenceRowsOf<LlamaSequence>;
  void attention_block(int layer, std::span<const SequenceRows> parts, int64_t n);
  void ffn_block(int layer, int64_t n);
  void residual_product(const Tensor& x, const Tensor& in, const Backend::LinearOut& proj,
                        const Tensor& post_norm);
  bool plain_stack() const;
  bool decode_layers(LlamaSequence& seq, const Tensor& x, int32_t position);

  LlamaDescriptor d_;
  WeightStore weights_;
  std::unique_ptr<Backend> backend_;
  TensorShard shard_;
  // This rank's share (the whole model when world is 1): query heads, KV heads (replicated when
  // there are fewer than ranks), MLP channels and vocabulary rows, and their local counts.
  ShardRange q_heads_, kv_heads_, ff_, vocab_;
  int64_t n_head_ = 0, n_head_kv_ = 0, n_ff_ = 0;
  // Row-parallel weights' column slices, and the k norm's gain as the ranks' KV heads gather.
  std::vector<Buffer> column_copies_;
  ModelInfo info_;
  bool headless_ = false;  // a base model without lm_head: the embedding stands in, unused
  Tensor embed_, final_norm_, lm_head_;
  OutputHead head_;
  std::vector<LlamaLayer> layers_;

  // Scratch in the backend's memory, sized for scratch_tokens_ rows.
  DType act_ = DType::F32;
  int64_t scratch_tokens_ = 0;
  DeviceBuffer x_, h_, q_, k_, v_, attn_, o_, gate_, up_;
  DeviceBuffer q_all_, k_all_;  // a q/k norm over all heads: the ranks' rows gathered
  std::vector<std::vector<float>> inv_freq_;
  std::vector<float> attention_factor_;
  // Whether one-token steps may go to Backend::decode_layers (plain_stack(), set at load), and
  // its per-step layer list.
  bool plain_stack_ = false;
  std::vector<Backend::DecodeLayer> step_layers_;
};

Tensor LlamaModel::take_norm(const std::string& name, int64_t n) {
  return backend_->prepare_weight(weights_.take(name, {n}, "hidden_size/head_dim"));
}

void LlamaModel::set_shard_sizes() {
  const int r = shard_.rank, n = shard_.world;
  if (n > 1) check_llama_tensor_parallel(d_, n);
  if (n > 1 && act_ != DType::F32)
    fail("tensor parallelism runs on the CPU backend only (f32 activations)");
  q_heads_ = shard_range(d_.n_head, r, n);
  // Fewer KV heads than ranks: each is replicated on world / n_head_kv ranks (as vLLM does).
  kv_heads_ = d_.n_head_kv >= n ? shard_range(d_.n_head_kv, r, n)
                                : ShardRange{r * d_.n_head_kv / n, r * d_.n_head_kv / n + 1};
  ff_ = shard_range(d_.n_ff, r, n);
  vocab_ = shard_range(d_.n_vocab, r, n);
  n_head_ = q_heads_.size();
  n_head_kv_ = kv_heads_.size();
  n_ff_ = ff_.size();
}

// The checkpoint's tensor, checked, not yet given to the backend (a rank takes its part first).
Linear LlamaModel::take_linear(const std::string& name, int64_t out, int64_t in, bool bias) {
  Linear l;
  l.w = weights_.take(name + ".weight", {out, in}, "config dimensions");
  if (bias) l.bias = weights_.take(name + ".bias", {out}, "config dimensions");
  if (!l.w.is_packed() && l.w.dtype != DType::F32 && l.w.dtype != DType::F16 &&
      l.w.dtype != DType::BF16)
    fail("tensor {}.weight has dtype {}; linear weights must be F32, F16 or BF16", name,
         dtype_name(l.w.dtype));
  return l;
}

Linear LlamaModel::prepared(Linear l) {
  l.w = backend_->prepare_weight(l.w);
  if (!l.bias.empty()) l.bias = backend_->prepare_weight(l.bias);
  return l;
}

// Column-parallel: this rank's output rows, views of the checkpoint's (bias rows with them).
Linear LlamaModel::rows_of(const std::string& name, const Linear& l, ShardRange rows) {
  if (rows.begin == 0 && rows.end == l.w.dim(0)) return prepared(l);
  refuse_row_cut(name + ".weight", l.w);
  return prepared({l.w.slice_rows(rows.begin, rows.end),
                   l.bias.empty() ? Tensor() : l.bias.slice_rows(rows.begin, rows.end)});
}

// Row-parallel: this rank's input columns, copied (weight_shard.h). The bias is kept by one rank
// only, so the all-reduce adds it once.
Linear LlamaModel::columns_of(const std::string& name, const Linear& l, ShardRange cols,
                              bool keep_bias) {
  return prepared({weight_columns(weights_, column_copies_, name, l.w, cols, shard_.world),
                   keep_bias ? l.bias : Tensor()});
}

void LlamaModel::load_weights() {
  // Multimodal wrappers (gemma3) keep the text model under a prefix; vision parts are unused.
  for (const char* prefix : {"model.vision_tower.", "vision_tower.", "model.multi_modal_projector.",
                             "multi_modal_projector."})
    weights_.ignore_prefix(prefix);
  const bool base_model = weights_.contains("embed_tokens.weight");
  use_text_model_names(weights_);
  const int64_t H = d_.n_embd, hd = d_.head_dim, nq = d_.n_head * hd, nkv = d_.n_head_kv * hd;
  // The rows of this rank's heads and channels in the projections, and of its vocabulary in the
  // embedding and head (all of them when world is 1).
  const ShardRange q_rows{q_heads_.begin * hd, q_heads_.end * hd};
  const ShardRange kv_rows{kv_heads_.begin * hd, kv_heads_.end * hd};
  const bool bias_rank = shard_.rank == 0;  // adds the row-parallel biases
  auto vocab_rows = [&](const std::string& name) {
    Tensor t = weights_.take(name, {d_.n_vocab, H}, "vocab_size, hidden_size");
    if (shard_.world > 1) {
      refuse_row_cut(name, t);
      t = t.slice_rows(vocab_.begin, vocab_.end);
    }
    return backend_->prepare_weight(t);
  };
  embed_ = vocab_rows("model.embed_tokens.weight");
  final_norm_ = take_norm("model.norm.weight", H);
  headless_ = !d_.tied_embeddings && base_model && !weights_.contains("lm_head.weight");
  lm_head_ = d_.tied_embeddings || headless_ ? embed_ : vocab_rows("lm_head.weight");
  layers_.resize(size_t(d_.n_layer));
  for (int64_t i = 0; i < d_.n_layer; ++i) {
    LlamaLayer& L = layers_[size_t(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    if (d_.input_norm) L.attn_norm = take_norm(p + "input_layernorm.weight", H);
    if (d_.post_attn_norm) L.post_attn_norm = take_norm(p + d_.post_attn_norm_name + ".weight", H);
    if (d_.pre_ffn_norm) L.ffn_norm = take_norm(p + d_.ffn_norm_name + ".weight", H);
    if (d_.post_ffn_norm) L.post_ffn_norm = take_norm(p + "post_feedforward_layernorm.weight", H);
    if (d_.qk_norm == QkNorm::PerHead) {
      L.q_norm = take_norm(p + "self_attn.q_norm.weight", hd);
      L.k_norm = take_norm(p + "self_attn.k_norm.weight", hd);
    } else if (d_.qk_norm == QkNorm::Full) {
      // One norm over all heads together: a rank normalises the all-gathered rows
      // (norm_gathered), whose gains are the whole q gain and k's laid out as the gather lays
      // out the ranks' KV heads (a replicated head once per rank that holds it).
      L.q_norm = take_norm(p + "self_attn.q_norm.weight", nq);
      L.k_norm = gathered_k_gain(p + "self_attn.k_norm.weight");
    }
    if (d_.fused_qkv && shard_.world == 1) {
      // Fused [q; k; v] rows: each part is a contiguous row range of the same matrix.
      Linear qkv = prepared(take_linear(p + "self_attn.qkv_proj", nq + 2 * nkv, H, d_.qkv_bias));
      L.q = {qkv.w.slice_rows(0, nq), qkv.bias.empty() ? Tensor() : qkv.bias.slice_rows(0, nq)};
      L.k = {qkv.w.slice_rows(nq, nq + nkv),
             qkv.bias.empty() ? Tensor() : qkv.bias.slice_rows(nq, nq + nkv)};
      L.v = {qkv.w.slice_rows(nq + nkv, nq + 2 * nkv),
             qkv.bias.empty() ? Tensor() : qkv.bias.slice_rows(nq + nkv, nq + 2 * nkv)};
    } else if (d_.fused_qkv) {  // this rank's rows of each part
      const Linear qkv = take_linear(p + "self_attn.qkv_proj", nq + 2 * nkv, H, d_.qkv_bias);
      L.q = rows_of(p + "self_attn.qkv_proj", qkv, q_rows);
      L.k = rows_of(p + "self_attn.qkv_proj", qkv, {nq + kv_rows.begin, nq + kv_rows.end});
      L.v = rows_of(p + "self_attn.qkv_proj", qkv,
                    {nq + nkv + kv_rows.begin, nq + nkv + kv_rows.end});
    } else if (shard_.world == 1) {  // separate tensors, stacked where the backend gains
      L.q = take_linear(p + "self_attn.q_proj", nq, H, d_.qkv_bias);
      L.k = take_linear(p + "self_attn.k_proj", nkv, H, d_.qkv_bias);
      L.v = take_linear(p + "self_attn.v_proj", nkv, H, d_.qkv_bias);
      prepare_stacked(*backend_, {&L.q, &L.k, &L.v});
    } else {
      L.q = rows_of(p + "self_attn.q_proj", take_linear(p + "self_attn.q_proj", nq, H, d_.qkv_bias),
                    q_rows);
      L.k = rows_of(p + "self_attn.k_proj",
                    take_linear(p + "self_attn.k_proj", nkv, H, d_.qkv_bias), kv_rows);
      L.v = rows_of(p + "self_attn.v_proj",
                    take_linear(p + "self_attn.v_proj", nkv, H, d_.qkv_bias), kv_rows);
    }
    L.o = columns_of(p + "self_attn.o_proj.weight",
                     take_linear(p + "self_attn.o_proj", H, nq, d_.o_bias), q_rows, bias_rank);
    if (d_.fused_gate_up && shard_.world == 1) {
      Linear gu = prepared(take_linear(p + "mlp.gate_up_proj", 2 * d_.n_ff, H, d_.mlp_bias));
      L.gate = {gu.w.slice_rows(0, d_.n_ff),
                gu.bias.empty() ? Tensor() : gu.bias.slice_rows(0, d_.n_ff)};
      L.up = {gu.w.slice_rows(d_.n_ff, 2 * d_.n_ff),
              gu.bias.empty() ? Tensor() : gu.bias.slice_rows(d_.n_ff, 2 * d_.n_ff)};
    } else if (d_.fused_gate_up) {
      const Linear gu = take_linear(p + "mlp.gate_up_proj", 2 * d_.n_ff, H, d_.mlp_bias);
      L.gate = rows_of(p + "mlp.gate_up_proj", gu, ff_);
      L.up = rows_of(p + "mlp.gate_up_proj", gu, {d_.n_ff + ff_.begin, d_.n_ff + ff_.end});
    } else if (shard_.world == 1) {
      L.gate = take_linear(p + "mlp.gate_proj", d_.n_ff, H, d_.mlp_bias);
      L.up = take_linear(p + "mlp.up_proj", d_.n_ff, H, d_.mlp_bias);
      prepare_stacked(*backend_, {&L.gate, &L.up});
    } else {
      L.gate = rows_of(p + "mlp.gate_proj",
                       take_linear(p + "mlp.gate_proj", d_.n_ff, H, d_.mlp_bias), ff_);
      L.up =
          rows_of(p + "mlp.up_proj", take_linear(p + "mlp.up_proj", d_.n_ff, H, d_.mlp_bias), ff_);
    }
    L.down = columns_of(p + "mlp.down_proj.weight",
                        take_linear(p + "mlp.down_proj", H, d_.n_ff, d_.mlp_bias), ff_, bias_rank);
  }
  inv_freq_.resize(d_.ropes.size());
  attention_factor_.resize(d_.ropes.size());
}

void LlamaModel::reserve_scratch(int64_t n) {
  if (n <= scratch_tokens_) return;
  const int64_t H = d_.n_embd, nq = n_head_ * d_.head_dim, nkv = n_head_kv_ * d_.head_dim;
  const size_t elem = dtype_size(act_);
  auto rows = [&](int64_t cols) { return backend_->alloc(size_t(n * cols) * elem); };
  x_ = rows(H);
  h_ = rows(H);
  o_ = rows(H);
  q_ = rows(nq);
  attn_ = rows(nq);
  k_ = rows(nkv);
  v_ = rows(nkv);
  gate_ = rows(n_ff_);
  up_ = rows(n_ff_);
  if (d_.qk_norm == QkNorm::Full && shard_.world > 1) {
    q_all_ = rows(nq * shard_.world);
    k_all_ = rows(nkv * shard_.world);
  }
  scratch_tokens_ = n;
}

void LlamaModel::attention_block(int il, std::span<const SequenceRows> parts, int64_t n) {
  const LlamaLayer& L = layers_[size_t(il)];
  const int64_t H = d_.n_embd, hd = d_.head_dim;
  const Tensor x = x_.view(act_, {n, H});
  const Tensor h = h_.view(act_, {n, H});
  const Tensor q = q_.view(act_, {n, n_head_, hd});
  const Tensor k = k_.view(act_, {n, n_head_kv_, hd});
  const Tensor v = v_.view(act_, {n, n_head_kv_, hd});
  const Tensor attn = attn_.view(act_, {n, n_head_, hd});
  const Tensor o = o_.view(act_, {n, H});
  Backend& be = *backend_;

  // The input norm happens inside the q/k/v products (h is only the composed form's scratch).
  const Backend::InputNorm norm{L.attn_norm, d_.norm_eps, d_.norm_offset, h};
  const Backend::LinearOut qkv[] = {
      {q, L.q.w, L.q.bias}, {k, L.k.w, L.k.bias}, {v, L.v.w, L.v.bias}};
  be.linear_many(x, qkv, 3, d_.input_norm ? &norm : nullptr);
  Tensor q_gain = L.q_norm, k_gain = L.k_norm;
  if (d_.qk_norm == QkNorm::Full) {  // olmo2: one norm over all heads together
    const Tensor q2 = q.reshaped({n, n_head_ * hd}), k2 = k.reshaped({n, n_head_kv_ * hd});
    if (shard_.world == 1) {
      be.rms_norm(q2, q2, L.q_norm, d_.norm_eps, d_.norm_offset);
      be.rms_norm(k2, k2, L.k_norm, d_.norm_eps, d_.norm_offset);
    } else {
      norm_gathered(q2, L.q_norm, q_all_);
      norm_gathered(k2, L.k_norm, k_all_);
    }
    q_gain = k_gain = Tensor();
  } else if (d_.qk_norm != QkNorm::PerHead) {
    q_gain = k_gain = Tensor();
  }
  RopeParams rp;
  if (d_.use_rope[size_t(il)]) {
    const int ri = d_.rope_index[size_t(il)];
    rp = {inv_freq_[size_t(ri)].data(), d_.ropes[size_t(ri)].rotary_dim,
          attention_factor_[size_t(ri)]};
  }
  AttentionParams ap;
  ap.n_head = int(n_head_);
  ap.n_head_kv = int(n_head_kv_);
  ap.head_dim = int(hd);
  ap.scale = d_.attn_scale;
  ap.softcap = d_.attn_softcap;
  ap.window = d_.window[size_t(il)];
  const RopeParams* rope = d_.use_rope[size_t(il)] ? &rp : nullptr;
  attend_parts(be, parts, q, k, v, attn, q_gain, k_gain, d_.norm_eps, d_.norm_offset, rope, ap,
               [il](const LlamaSequence& s) { return s.kv.view(il); });
  residual_product(x, attn.reshaped({n, n_head_ * hd}), {o, L.o.w, L.o.bias}, L.post_attn_norm);
}

// x += out_proj(in) * residual_scale, with the gemma-style norm of the product in between
// when the model has one (then the add cannot happen inside the product). A row-parallel rank's
// product is its part of the sum: all-reduced before the norm and the add, so every rank adds
// the same rows to its copy of x.
void LlamaModel::residual_product(const Tensor& x, const Tensor& in, const Backend::LinearOut& proj,
                                  const Tensor& post_norm) {
  Backend& be = *backend_;
  if (post_norm.empty() && shard_.world == 1)
    return be.linear_residual(x, in, proj, d_.residual_scale);
  be.linear(proj.y, in, proj.w, proj.bias);
  all_reduce(proj.y);
  if (post_norm.empty()) return be.add(x, x, proj.y, d_.residual_scale);
  be.rms_norm(proj.y, proj.y, post_norm, d_.norm_eps, d_.norm_offset);
  be.add(x, x, proj.y, d_.residual_scale);
}

void LlamaModel::ffn_block(int il, int64_t n) {
  const LlamaLayer& L = layers_[size_t(il)];
  const int64_t H = d_.n_embd;
  const Tensor x = x_.view(act_, {n, H});
  const Tensor h = h_.view(act_, {n, H});
  const Tensor o = o_.view(act_, {n, H});
  const Tensor gate = gate_.view(act_, {n, n_ff_});
  const Tensor up = up_.view(act_, {n, n_ff_});
  Backend& be = *backend_;
  const Backend::InputNorm norm{L.ffn_norm, d_.norm_eps, d_.norm_offset, h};
  be.linear_glu(gate, up, x, {gate, L.gate.w, L.gate.bias}, {up, L.up.w, L.up.bias}, d_.act,
                d_.pre_ffn_norm ? &norm : nullptr);
  residual_product(x, gate, {o, L.down.w, L.down.bias}, L.post_ffn_norm);
}

// The k norm's gain over the gathered rows: every rank's KV heads in rank order, so a head that
// several ranks hold (fewer KV heads than ranks) appears once per rank. The whole gain otherwise.
Tensor LlamaModel::gathered_k_gain(const std::string& name) {
  const int64_t hd = d_.head_dim, nkv = d_.n_head_kv * hd;
  if (d_.n_head_kv >= shard_.world) return take_norm(name, nkv);
  const Tensor gain = weights_.take(name, {nkv}, "hidden_size/head_dim");
  const size_t head_bytes = size_t(hd) * dtype_size(gain.dtype);
  Buffer& copy = column_copies_.emplace_back(size_t(shard_.world) * head_bytes);
  auto* dst = static_cast<std::byte*>(copy.data());
  for (int r = 0; r < shard_.world; ++r)  // one KV head per rank
    std::memcpy(dst + size_t(r) * head_bytes,
                static_cast<const std::byte*>(gain.data) +
                    size_t(r * d_.n_head_kv / shard_.world) * head_bytes,
                head_bytes);
  weights_.note_copy(copy.data(), copy.size(), gain.data);
  return backend_->prepare_weight(Tensor(copy.data(), gain.dtype, {shard_.world * hd}));
}

// An RMSNorm over whole rows of which this rank holds a slice (rows [n, width], every rank the
// same width): the slices all-gathered into `scratch` ([n, width * world]), normalised there with
// `gain`, and this rank's columns copied back. A KV head repeated on several ranks is repeated
// in the row as often as every other head, so the row's mean square is the unique row's.
void LlamaModel::norm_gathered(const Tensor& rows, const Tensor& gain,
                               const DeviceBuffer& scratch) {
  Backend& be = *backend_;
  const int64_t n = rows.dim(0), width = rows.dim(1), all = width * shard_.world;
  const Tensor gathered = scratch.view(act_, {n, all});
  const std::vector<int64_t> widths(size_t(shard_.world), width);
  shard_.comm->all_gather_columns(rows.as<float>(), n, widths, gathered.as<float>());
  be.rms_norm(gathered, gathered, gain, d_.norm_eps, d_.norm_offset);
  for (int64_t t = 0; t < n; ++t)
    be.copy(rows.slice_rows(t, t + 1),
            Tensor(gathered.as<float>() + t * all + shard_.rank * width, act_, {1, width}));
}

void LlamaModel::all_reduce(const Tensor& t) {
  if (shard_.world > 1) shard_.comm->all_reduce_sum(t.as<float>(), size_t(t.numel()));
}

// The input rows. A rank holds only its vocabulary rows: it looks up the tokens that fall in
// them, leaves zeros for the others, and the all-reduce sums the one non-zero row per token
// (exact: the other terms are zeros).
void LlamaModel::embed_tokens(const Tensor& x, std::span<const int32_t> tokens) {
  Backend& be = *backend_;
  if (shard_.world == 1) return be.embedding(x, embed_, tokens.data(), d_.embed_scale);
  be.fill(x, 0.0f);
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < vocab_.begin || tokens[t] >= vocab_.end) continue;
    const int32_t id = int32_t(tokens[t] - vocab_.begin);
    be.embedding(x.slice_rows(int64_t(t), int64_t(t) + 1), embed_, &id, d_.embed_scale);
  }
  all_reduce(x);
}

// The stacks Backend::decode_layers describes: both norms before their blocks and none after,
// no biases, per-head or no q/k norm, one rope over the whole head in every layer (or none),
// full attention without softcap, an unscaled residual.
bool LlamaModel::plain_stack() const {
  if (!d_.input_norm || !d_.pre_ffn_norm || d_.residual_scale != 1.0f || d_.attn_softcap != 0.0f ||
      (d_.qk_norm != QkNorm::PerHead && d_.qk_norm != QkNorm::None))
    return false;
  for (int il = 0; il < int(d_.n_layer); ++il) {
    const LlamaLayer& L = layers_[size_t(il)];
    if (d_.window[size_t(il)] != 0 || d_.use_rope[size_t(il)] != d_.use_rope[0] ||
        d_.rope_index[size_t(il)] != d_.rope_index[0] || !L.post_attn_norm.empty() ||
        !L.post_ffn_norm.empty())
      return false;
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
      if (!l->bias.empty()) return false;
  }
  return !d_.use_rope[0] || d_.ropes[size_t(d_.rope_index[0])].rotary_dim == d_.head_dim;
}

// A one-token step's layers in one backend call, where the backend takes it.
bool LlamaModel::decode_layers(LlamaSequence& seq, const Tensor& x, int32_t position) {
  if (!plain_stack_) return false;
  step_layers_.resize(size_t(d_.n_layer));
  for (int il = 0; il < int(d_.n_layer); ++il) {
    const LlamaLayer& L = layers_[size_t(il)];
    Backend::DecodeLayer& s = step_layers_[size_t(il)];
    s = Backend::DecodeLayer{};
    s.attn_norm = L.attn_norm;
    s.q = L.q.w;
    s.k = L.k.w;
    s.v = L.v.w;
    s.o = L.o.w;
    s.ffn_norm = L.ffn_norm;
    s.gate = L.gate.w;
    s.up = L.up.w;
    s.down = L.down.w;
    s.kv = seq.kv.view(il);
    if (d_.qk_norm == QkNorm::PerHead) {
      s.q_norm = L.q_norm;
      s.k_norm = L.k_norm;
    }
  }
  Backend::DecodeLayers step = decode_step(step_layers_, d_, x, position);
  step.eps = d_.norm_eps;
  step.norm_offset = d_.norm_offset;
  step.attn_scale = d_.attn_scale;
  if (d_.use_rope[0]) {
    const size_t ri = size_t(d_.rope_index[0]);
    step.rope = {inv_freq_[ri].data(), d_.ropes[ri].rotary_dim, attention_factor_[ri]};
  }
  step.act = d_.act;
  return backend_->decode_layers(step);
}

void LlamaModel::run(SequenceState& state, std::span<const int32_t> tokens, LogitsRows rows,
                     float* logits, const TokenPick* pick, int32_t* token) {
  auto& seq = static_cast<LlamaSequence&>(state);
  const int64_t n = int64_t(tokens.size());
  if (n == 0) return;
  check_tokens(tokens, d_.n_vocab);
  reserve_scratch(n);
  const int64_t start = seq.n_past();
  start_step(*backend_, n, start);

  // Rope frequencies: fixed except for dynamic NTK, which follows the longest sequence seen.
  for (size_t r = 0; r < d_.ropes.size(); ++r) {
    const RopeSpec& spec = d_.ropes[r];
    int64_t seq_len = start + n;
    if (spec.type == "dynamic") {
      if (seq_len > seq.rope_max_seq[r]) seq.rope_max_seq[r] = seq_len;
      if (seq_len < spec.max_position && seq.rope_max_seq[r] > spec.max_position)
        seq.rope_max_seq[r] = spec.max_position;
      seq_len = seq.rope_max_seq[r];
    }
    if (inv_freq_[r].empty() || spec.type == "dynamic")
      inv_freq_[r] = spec.inv_freq(seq_len, &attention_factor_[r]);
  }

  const int64_t H = d_.n_embd;
  const Tensor x = x_.view(act_, {n, H});
  if (shard_.world == 1)
    embed(*backend_, x, embed_, tokens, d_.embed_scale);
  else
    embed_tokens(x, tokens);
  seq.kv.reserve_batch(n);
  if (n != 1 || !decode_layers(seq, x, positions_[0])) {
    const SequenceRows one[] = {{&seq, 0, n}};
    for (int il = 0; il < int(d_.n_layer); ++il) {
      attention_block(il, one, n);
      ffn_block(il, n);
    }
  }
  seq.kv.commit_batch();
  finish_with_logits(*backend_, x, h_.view(act_, {n, H}), rows, head_, logits, pick, token);
}

// The rows of several sequences through the layers together: each linear layer reads its
// weights once for all of them. Dynamic-NTK rope, whose frequencies follow each sequence's
// length, runs the sequences in turn.
void LlamaModel::forward_batch(std::span<const BatchItem> items) {
  check_batch(items);
  bool together = items.size() > 1;
  for (const RopeSpec& spec : d_.ropes) together = together && spec.type != "dynamic";
  if (!together) return Model::forward_batch(items);
  std::vector<int32_t> tokens;
  const auto parts = batch_rows<LlamaSequence>(items, d_.n_vocab, tokens);
  const int64_t n = int64_t(tokens.size());
  reserve_scratch(n);
  // The caches' new blocks come first: an allocation would end a recorded step early.
  for (const SequenceRows& p : parts) p.seq->kv.reserve_batch(p.rows);
  backend_->begin_batch_step(n, int64_t(parts.size()));
  for (size_t r = 0; r < d_.ropes.size(); ++r)
    if (inv_freq_[r].empty()) inv_freq_[r] = d_.ropes[r].inv_freq(0, &attention_factor_[r]);
  const int64_t H = d_.n_embd;
  const Tensor x = x_.view(act_, {n, H});
  embed_tokens(x, tokens);
  for (int il = 0; il < int(d_.n_layer); ++il) {
    attention_block(il, parts, n);
    ffn_block(il, n);
  }
  for (const SequenceRows& p : parts) p.seq->kv.commit_batch();
  finish_with_item_logits(*backend_, x, o_, h_, act_, items, head_);
}

}  // namespace

void check_llama_tensor_parallel(const LlamaDescriptor& d, int world) {
  if (world < 1) fail("the tensor-parallel size must be at least 1 (got {})", world);
  if (world == 1) return;
  // vLLM's rule: query heads and MLP channels divide among the ranks; KV heads too, or the
  // ranks among them (each KV head then replicated on world / n_head_kv ranks).
  if (d.n_head % world != 0)
    fail(
        "--tensor-parallel {}: num_attention_heads ({}) must be divisible by the tensor-parallel "
        "size (each rank holds whole heads, as in vLLM)",
        world, d.n_head);
  if (d.n_head_kv % world != 0 && world % d.n_head_kv != 0)
    fail(
        "--tensor-parallel {}: num_key_value_heads ({}) must be divisible by the tensor-parallel "
        "size, or the size by it (KV heads are then replicated, as in vLLM)",
        world, d.n_head_kv);
  if (d.n_ff % world != 0)
    fail(
        "--tensor-parallel {}: intermediate_size ({}) must be divisible by the tensor-parallel "
        "size (as in vLLM)",
        world, d.n_ff);
}

std::unique_ptr<Model> make_llama_model(const ModelConfig& config, WeightStore weights,
                                        std::unique_ptr<Backend> backend, const LoadOptions&) {
  return std::make_unique<LlamaModel>(config, std::move(weights), std::move(backend),
                                      TensorShard{});
}

std::unique_ptr<Model> make_llama_rank_model(const ModelConfig& config, WeightStore weights,
                                             std::unique_ptr<Backend> backend,
                                             const TensorShard& shard) {
  return std::make_unique<LlamaModel>(config, std::move(weights), std::move(backend), shard);
}

}  // namespace hearth
