// Checkpoint normalisation for the Qwen3.5 family, once at load:
// - names: model.language_model.* (HF wrappers) and language_model.model.* (MLX) → model.*,
//   language_model.lm_head.* → lm_head.*; vision towers skipped with one notice; mtp.* kept.
// - MLX conversions store conv1d as [C, K, 1] and the zero-centred gains already shifted (1 + w);
//   as in mlx-lm, a [C, K, 1] conv marks a converted checkpoint. [C, 1, K] and [C, K, 1] have the
//   same memory order, so both are read as [C, K] and transposed to [K, C] f32 for the kernel.
// - q_proj rows are [query(D) | gate(D)] per head: split into a query block and a gate block.
// - Qwen3-Next in_proj_qkvz / in_proj_ba are grouped per key head ([q k v z] / [b a] per group):
//   re-laid as [q | k | v | z] and [b | a] so in_proj_qkv, in_proj_z, b and a are row slices.
#include "models/qwen3_5_weights.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "models/weight_shard.h"

namespace hearth {

namespace {

using RowRanges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) row ranges, in order

// Copies `ranges` of rows of a 2-D buffer with `row_bytes` per row into a new owned buffer.
void* copy_row_bytes(const void* src, size_t row_bytes, const RowRanges& ranges,
                     std::vector<Buffer>& owned) {
  int64_t rows = 0;
  for (auto [b, e] : ranges) rows += e - b;
  Buffer buf(size_t(rows) * row_bytes);
  char* dst = static_cast<char*>(buf.data());
  for (auto [b, e] : ranges) {
    std::memcpy(dst, static_cast<const char*>(src) + size_t(b) * row_bytes,
                size_t(e - b) * row_bytes);
    dst += size_t(e - b) * row_bytes;
  }
  void* p = buf.data();
  owned.push_back(std::move(buf));
  return p;
}

// Copies `ranges` of a 2-D tensor's rows, in order, into new owned memory of the same format (a
// packed weight's codes with their scales and biases).
Tensor copy_rows(const Tensor& src, const RowRanges& ranges, std::vector<Buffer>& owned) {
  int64_t rows = 0;
  for (auto [b, e] : ranges) rows += e - b;
  if (!src.is_packed()) {
    void* p = copy_row_bytes(src.data, size_t(src.cols()) * dtype_size(src.dtype), ranges, owned);
    return Tensor(p, src.dtype, {rows, src.cols()});
  }
  // Rows of a packed matrix: slice_rows checks the format allows it (not transposed trellis).
  (void)src.slice_rows(0, 1);
  Tensor t = src;
  t.shape[0] = rows;
  t.data = copy_row_bytes(src.data, size_t(src.cols()) * src.packed.bits / 8, ranges, owned);
  const int64_t params =
      src.packed.format == WeightFormat::Affine ? src.cols() / src.packed.group_size : 1;
  const size_t param_bytes = size_t(params) * dtype_size(src.packed.param_dtype);
  t.packed.scales = copy_row_bytes(src.packed.scales, param_bytes, ranges, owned);
  if (src.packed.biases)
    t.packed.biases = copy_row_bytes(src.packed.biases, param_bytes, ranges, owned);
  return t;
}

float element_f32(const Tensor& t, int64_t i) {
  uint16_t h;
  switch (t.dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, t.as<const char>() + i * 4, 4);
      return f;
    }
    case DType::BF16:
      std::memcpy(&h, t.as<const char>() + i * 2, 2);
      return bf16_to_f32(h);
    case DType::F16:
      std::memcpy(&h, t.as<const char>() + i * 2, 2);
      return f16_to_f32(h);
    default:
      return 0.0f;
  }
}

// Elements [part.begin, part.end) of a 1-D tensor as f32, owned.
Tensor to_f32(const Tensor& src, ShardRange part, std::vector<Buffer>& owned) {
  Buffer buf(size_t(part.size()) * sizeof(float));
  float* f = static_cast<float*>(buf.data());
  for (int64_t i = 0; i < part.size(); ++i) f[i] = element_f32(src, part.begin + i);
  Tensor t(buf.data(), DType::F32, {part.size()});
  owned.push_back(std::move(buf));
  return t;
}

void check_float(const Tensor& t, const std::string& name) {
  if (t.is_packed()) return;  // a quantized linear or embedding
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail("tensor {} has dtype {}; expected F32, F16 or BF16", name, dtype_name(t.dtype));
}

class Loader {
 public:
  Loader(WeightStore& store, const Qwen35Descriptor& d, const Qwen35Shard& shard, Qwen35Weights& w,
         Backend& be)
      : s_(store), d_(d), sh_(shard), w_(w), be_(be) {}

  Tensor take(const std::string& name, std::vector<int64_t> shape, const char* from) {
    Tensor t = s_.take(name, std::move(shape), from);
    check_float(t, name);
    return t;
  }

  Linear linear(const std::string& name, int64_t out, int64_t in, bool bias) {
    Linear l;
    l.w = take(name + ".weight", {out, in}, "config dimensions");
    if (bias) l.bias = take(name + ".bias", {out}, "attention_bias");
    return l;
  }

  // Column-parallel: this rank's rows `r` of the checkpoint's tensor `name`, a view.
  Tensor rows(const std::string& name, const Tensor& t, ShardRange r) {
    if (t.empty() || (r.begin == 0 && r.end == t.dim(0))) return t;
    refuse_row_cut(name, t);
    return t.slice_rows(r.begin, r.end);
  }
  Linear rows(const std::string& name, const Linear& l, ShardRange r) {
    return {rows(name + ".weight", l.w, r), rows(name + ".bias", l.bias, r)};
  }
  // Row-parallel: this rank's input columns `c`, copied (weight_shard.h).
  Tensor columns(const std::string& name, const Tensor& t, ShardRange c) {
    return weight_columns(s_, w_.owned, name, t, c, sh_.world);
  }

  void attention(Qwen35Layer& L, const std::string& p) {
    const int64_t H = d_.n_embd, D = d_.head_dim, nq = d_.n_head * D, nkv = d_.n_head_kv * D;
    const bool bias = d_.attention_bias;
    const ShardRange q_rows{sh_.q_heads.begin * D, sh_.q_heads.end * D};
    const ShardRange kv_rows{sh_.kv_heads.begin * D, sh_.kv_heads.end * D};
    if (d_.attn_output_gate) {
      const Linear qg = linear(p + "q_proj", 2 * nq, H, bias);
      if (sh_.world > 1) refuse_row_cut(p + "q_proj.weight", qg.w);
      RowRanges query, gate;  // this rank's heads
      for (int64_t h = sh_.q_heads.begin; h < sh_.q_heads.end; ++h) {
        query.emplace_back(2 * h * D, 2 * h * D + D);
        gate.emplace_back(2 * h * D + D, 2 * h * D + 2 * D);
      }
      L.q.w = copy_rows(qg.w, query, w_.owned);
      L.gate.w = copy_rows(qg.w, gate, w_.owned);
      s_.note_copy(L.q.w.data, L.q.w.nbytes(), qg.w.data);
      s_.note_copy(L.gate.w.data, L.gate.w.nbytes(), qg.w.data);
      if (bias) {
        const Tensor b2 = qg.bias.reshaped({2 * nq, 1});
        L.q.bias = copy_rows(b2, query, w_.owned).reshaped({q_rows.size()});
        L.gate.bias = copy_rows(b2, gate, w_.owned).reshaped({q_rows.size()});
      }
    } else {
      L.q = rows(p + "q_proj", linear(p + "q_proj", nq, H, bias), q_rows);
    }
    L.k = rows(p + "k_proj", linear(p + "k_proj", nkv, H, bias), kv_rows);
    L.v = rows(p + "v_proj", linear(p + "v_proj", nkv, H, bias), kv_rows);
    // The bias of a row-parallel product is added by rank 0 only, so the all-reduce adds it once.
    const Linear o = linear(p + "o_proj", H, nq, bias);
    L.o = {columns(p + "o_proj.weight", o.w, q_rows), sh_.rank == 0 ? o.bias : Tensor()};
    L.q_norm = take(p + "q_norm.weight", {D}, "head_dim");
    L.k_norm = take(p + "k_norm.weight", {D}, "head_dim");
  }

  void linear_attention(Qwen35Layer& L, const std::string& p) {
    const int64_t H = d_.n_embd, Hk = d_.lin_k_heads, Hv = d_.lin_v_heads, Dk = d_.lin_k_dim,
                  Dv = d_.lin_v_dim, C = d_.conv_dim(), K = d_.conv_kernel;
    const char* cfg = "linear_num_{key,value}_heads, linear_{key,value}_head_dim, hidden_size";
    // This rank's heads (all of them when world is 1): its q, k and v channels in the canonical
    // [q | k | v] order of in_proj_qkv's rows and the conv's channels, and its z, b, a rows.
    const ShardRange kh = sh_.k_heads, vh = sh_.v_heads;
    const RowRanges channels = {{kh.begin * Dk, kh.end * Dk},
                                {Hk * Dk + kh.begin * Dk, Hk * Dk + kh.end * Dk},
                                {2 * Hk * Dk + vh.begin * Dv, 2 * Hk * Dk + vh.end * Dv}};
    const int64_t c_local = 2 * kh.size() * Dk + vh.size() * Dv;
    if (d_.fused_qkvz) {
      // Per key head kh a group [q(Dk) k(Dk) v(g·Dv) z(g·Dv)] of rows; value head h is the
      // (h % g)-th of key head h / g's group. Re-laid as [q | k | v | z] of this rank's heads.
      const int64_t g = Hv / Hk, group_rows = 2 * Dk + 2 * g * Dv;
      const Tensor qkvz = take(p + "in_proj_qkvz.weight", {2 * Hk * Dk + 2 * Hv * Dv, H}, cfg);
      if (sh_.world > 1) refuse_row_cut(p + "in_proj_qkvz.weight", qkvz);
      RowRanges order;
      for (int part = 0; part < 2; ++part)  // q, k
        for (int64_t k = kh.begin; k < kh.end; ++k)
          order.emplace_back(k * group_rows + part * Dk, k * group_rows + part * Dk + Dk);
      for (int part = 0; part < 2; ++part)  // v, z
        for (int64_t h = vh.begin; h < vh.end; ++h) {
          const int64_t at = (h / g) * group_rows + 2 * Dk + part * g * Dv + (h % g) * Dv;
          order.emplace_back(at, at + Dv);
        }
      const Tensor all = copy_rows(qkvz, order, w_.owned);
      s_.note_copy(all.data, all.nbytes(), qkvz.data);
      L.in_qkv = all.slice_rows(0, c_local);
      L.in_z = all.slice_rows(c_local, c_local + vh.size() * Dv);
      const Tensor ba = take(p + "in_proj_ba.weight", {2 * Hv, H}, cfg);
      if (sh_.world > 1) refuse_row_cut(p + "in_proj_ba.weight", ba);
      RowRanges ba_order;  // per key head [b(g) a(g)]
      for (int part = 0; part < 2; ++part)
        for (int64_t h = vh.begin; h < vh.end; ++h) {
          const int64_t at = (h / g) * 2 * g + part * g + h % g;
          ba_order.emplace_back(at, at + 1);
        }
      const Tensor ba2 = copy_rows(ba, ba_order, w_.owned);
      s_.note_copy(ba2.data, ba2.nbytes(), ba.data);
      L.in_b = ba2.slice_rows(0, vh.size());
      L.in_a = ba2.slice_rows(vh.size(), 2 * vh.size());
    } else {
      const Tensor qkv = take(p + "in_proj_qkv.weight", {C, H}, cfg);
      if (c_local == C) {
        L.in_qkv = qkv;
      } else {
        refuse_row_cut(p + "in_proj_qkv.weight", qkv);
        L.in_qkv = copy_rows(qkv, channels, w_.owned);
        s_.note_copy(L.in_qkv.data, L.in_qkv.nbytes(), qkv.data);
      }
      L.in_z = rows(p + "in_proj_z.weight", take(p + "in_proj_z.weight", {Hv * Dv, H}, cfg),
                    {vh.begin * Dv, vh.end * Dv});
      L.in_b = rows(p + "in_proj_b.weight", take(p + "in_proj_b.weight", {Hv, H}, cfg), vh);
      L.in_a = rows(p + "in_proj_a.weight", take(p + "in_proj_a.weight", {Hv, H}, cfg), vh);
    }
    const std::string conv_name = p + "conv1d.weight";
    const TensorInfo* ci = s_.find(conv_name);
    if (!ci) fail("checkpoint {}: missing tensor {}", s_.dir().string(), conv_name);
    std::vector<int64_t> shape = ci->shape;
    if (shape.size() == 2) shape = {shape[0], 1, shape[1]};
    const bool mlx = shape.size() == 3 && shape[2] == 1 && shape[1] == K && K > 1;
    const Tensor conv = take(conv_name,
                             mlx                     ? std::vector<int64_t>{C, K, 1}
                             : ci->shape.size() == 2 ? std::vector<int64_t>{C, K}
                                                     : std::vector<int64_t>{C, 1, K},
                             "conv_dim, linear_conv_kernel_dim");
    Buffer buf(size_t(K * c_local) * sizeof(float));  // this rank's channels
    float* f = static_cast<float*>(buf.data());
    int64_t c = 0;
    for (auto [begin, end] : channels)
      for (int64_t from = begin; from < end; ++from, ++c)
        for (int64_t k = 0; k < K; ++k) f[k * c_local + c] = element_f32(conv, from * K + k);
    L.conv_w = Tensor(buf.data(), DType::F32, {K, c_local});
    w_.owned.push_back(std::move(buf));
    if (first_conv_) {
      w_.mlx_layout = mlx;
      first_conv_ = false;
    } else if (mlx != w_.mlx_layout) {
      fail(
          "checkpoint {}: {} has shape [{}, {}, {}], unlike the first linear layer's conv1d "
          "(mixed HF and MLX layouts)",
          s_.dir().string(), conv_name, shape[0], shape[1], shape[2]);
    }
    L.a_log = to_f32(take(p + "A_log", {Hv}, "linear_num_value_heads"), vh, w_.owned);
    L.dt_bias = to_f32(take(p + "dt_bias", {Hv}, "linear_num_value_heads"), vh, w_.owned);
    L.lin_norm = take(p + "norm.weight", {Dv}, "linear_value_head_dim");  // per head_dim: whole
    L.out_proj = columns(p + "out_proj.weight", take(p + "out_proj.weight", {H, Hv * Dv}, cfg),
                         {vh.begin * Dv, vh.end * Dv});
  }

  void load() {
    // Canonical names first.
    use_text_model_names(s_);
    size_t vision = 0;
    for (const char* prefix : {"model.visual.", "visual.", "vision_tower.", "model.vision_tower."})
      vision += s_.ignore_prefix(prefix);
    if (vision > 0)
      log(LogLevel::Info, "{}: skipping {} vision tensors (text-only model)", s_.dir().string(),
          vision);
    for (const auto& name : s_.names()) {
      if (name.rfind("mtp.", 0) != 0) continue;
      const TensorInfo* info = s_.find(name);
      w_.mtp[name] = s_.take(name, std::vector<int64_t>(info->shape.size(), -1), "mtp");
    }

    const int64_t H = d_.n_embd;
    // A rank holds its vocabulary rows of the embedding and the head.
    auto vocab_rows = [&](const std::string& name) {
      return rows(name, take(name, {d_.n_vocab, H}, "vocab_size, hidden_size"), sh_.vocab);
    };
    w_.embed = vocab_rows("model.embed_tokens.weight");
    w_.final_norm = take("model.norm.weight", {H}, "hidden_size");
    w_.lm_head = d_.tied_embeddings ? w_.embed : vocab_rows("lm_head.weight");
    w_.layers.resize(size_t(d_.n_layer));
    for (int64_t i = 0; i < d_.n_layer; ++i) {
      Qwen35Layer& L = w_.layers[size_t(i)];
      const std::string p = "model.layers." + std::to_string(i) + ".";
      L.attn_norm = take(p + "input_layernorm.weight", {H}, "hidden_size");
      L.ffn_norm = take(p + "post_attention_layernorm.weight", {H}, "hidden_size");
      if (d_.linear_layer[size_t(i)])
        linear_attention(L, p + "linear_attn.");
      else
        attention(L, p + "self_attn.");
      if (d_.moe_layer[size_t(i)]) {
        L.moe = moe_take_weights(s_, p + "mlp.", d_.moe);
        if (sh_.world > 1) keep_rank_experts(L.moe, p + "mlp.");
      } else {
        const char* cfg = "intermediate_size";
        L.mlp_gate = rows(p + "mlp.gate_proj.weight",
                          take(p + "mlp.gate_proj.weight", {d_.n_ff, H}, cfg), sh_.ff);
        L.mlp_up = rows(p + "mlp.up_proj.weight", take(p + "mlp.up_proj.weight", {d_.n_ff, H}, cfg),
                        sh_.ff);
        L.mlp_down = columns(p + "mlp.down_proj.weight",
                             take(p + "mlp.down_proj.weight", {H, d_.n_ff}, cfg), sh_.ff);
      }
    }
    w_.norm_offset = d_.zero_centred_norms && !w_.mlx_layout ? 1.0f : 0.0f;
    prepare_all();
  }

 private:
  // Expert parallelism: this rank keeps its experts whole (the others' entries emptied; their
  // tensors stay unread in the mapping) and its channels of the shared expert, split like a
  // dense MLP. The router and the shared expert's gate are replicated.
  void keep_rank_experts(MoeWeights& m, const std::string& p) {
    for (int64_t e = 0; e < d_.moe.n_expert; ++e) {
      if (e >= sh_.experts.begin && e < sh_.experts.end) continue;
      m.gate[size_t(e)] = m.up[size_t(e)] = m.down[size_t(e)] = Tensor();
    }
    m.held_begin = sh_.experts.begin;
    m.held_end = sh_.experts.end;
    if (m.shared_gate.empty()) return;
    m.shared_gate = rows(p + "shared_expert.gate_proj.weight", m.shared_gate, sh_.shared_ff);
    m.shared_up = rows(p + "shared_expert.up_proj.weight", m.shared_up, sh_.shared_ff);
    m.shared_down = columns(p + "shared_expert.down_proj.weight", m.shared_down, sh_.shared_ff);
  }

  // Hands every tensor to the backend once everything is resolved (host views until then).
  void prepare_all() {
    auto prep = [&](Tensor& t) {
      if (!t.empty()) t = be_.prepare_weight(t);
    };
    const bool tied = w_.lm_head.data == w_.embed.data;
    prep(w_.embed);
    prep(w_.final_norm);
    if (tied)
      w_.lm_head = w_.embed;
    else
      prep(w_.lm_head);
    // The MTP head is not run yet: only rank 0 of a tensor-parallel model prepares it (a
    // backend that copies weights would otherwise hold it once per rank).
    if (sh_.rank == 0)
      for (auto& [name, t] : w_.mtp) prep(t);
    for (auto& L : w_.layers) {
      // The products of one input together, in the order the model runs them (linear_many,
      // linear_glu).
      if (!L.gate.w.empty())  // the attention output gate
        prepare_stacked(be_, {&L.q.w, &L.k.w, &L.v.w, &L.gate.w});
      else if (!L.q.w.empty())
        prepare_stacked(be_, {&L.q.w, &L.k.w, &L.v.w});
      else
        prepare_stacked(be_, {&L.in_qkv, &L.in_z, &L.in_b, &L.in_a});
      prepare_stacked(be_, {&L.mlp_gate, &L.mlp_up});
      for (Tensor* t : {&L.attn_norm,     &L.ffn_norm,        &L.q.bias,
                        &L.gate.bias,     &L.k.bias,          &L.v.bias,
                        &L.o.w,           &L.o.bias,          &L.q_norm,
                        &L.k_norm,        &L.out_proj,        &L.conv_w,
                        &L.a_log,         &L.dt_bias,         &L.lin_norm,
                        &L.mlp_down,      &L.moe.router,      &L.moe.shared_gate,
                        &L.moe.shared_up, &L.moe.shared_down, &L.moe.shared_expert_gate})
        prep(*t);
      for (auto* v : {&L.moe.gate, &L.moe.up, &L.moe.down})
        for (auto& t : *v) prep(t);
    }
  }

  WeightStore& s_;
  const Qwen35Descriptor& d_;
  const Qwen35Shard& sh_;
  Qwen35Weights& w_;
  Backend& be_;
  bool first_conv_ = true;
};

}  // namespace

Qwen35Weights qwen3_5_load_weights(WeightStore& store, const Qwen35Descriptor& d,
                                   const Qwen35Shard& shard, Backend& backend) {
  Qwen35Weights w;
  Loader(store, d, shard, w, backend).load();
  return w;
}

}  // namespace hearth
