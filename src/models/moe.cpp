// MoE block: loading the three expert layouts as views (float or packed: an expert of a stacked
// quantized tensor is a 2-D packed view with its own codes, scales and biases), and the forward:
// router logits (f32), then the backend's moe_experts (routing: softmax, top-k, renormalisation;
// the routed experts), then the shared expert. The CPU composes moe_experts from plain ops with
// host routing; the CUDA backend routes on the device so a decode step needs no host round trip.
#include "models/moe.h"

#include <algorithm>

#include "core/error.h"

namespace hearth {

namespace {

void check_linear_dtype(const Tensor& t, const std::string& name) {
  if (!t.is_packed() && t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail("tensor {} has dtype {}; expert weights must be F32, F16 or BF16", name,
         dtype_name(t.dtype));
}

// A stacked expert tensor [E, rows, cols], float or packed (MLX affine, trellis).
Tensor take_stacked(WeightStore& store, const std::string& name, std::vector<int64_t> shape,
                    const std::string& cfg) {
  const Tensor t = store.take(name, std::move(shape), cfg);
  check_linear_dtype(t, name);
  return t;
}

// Expert e's [rows, cols] matrix of a stacked [E, rows, cols] weight, as a view. Sliced along the
// experts first, so a packed weight's codes, scales and biases follow in every format (the rows
// of a transposed trellis matrix could not be sliced after flattening to [E·rows, cols]).
Tensor expert_matrix(const Tensor& stacked, int64_t e) {
  return stacked.slice_rows(e, e + 1).reshaped({stacked.dim(1), stacked.dim(2)});
}

// The first of `names` present in the store, or "".
std::string first_present(const WeightStore& store, std::initializer_list<std::string> names) {
  for (const auto& n : names)
    if (store.contains(n)) return n;
  return "";
}

}  // namespace

MoeWeights moe_take_weights(WeightStore& store, const std::string& p, const MoeShape& s) {
  MoeWeights w;
  const int64_t E = s.n_expert, H = s.n_embd, I = s.n_ff_expert;
  const std::string cfg = "num_experts, moe_intermediate_size, hidden_size";
  w.router = store.take(p + "gate.weight", {E, H}, "num_experts, hidden_size");
  w.gate.resize(size_t(E));
  w.up.resize(size_t(E));
  w.down.resize(size_t(E));
  const std::string fused_gu =
      first_present(store, {p + "experts.gate_up_proj", p + "experts.gate_up_proj.weight"});
  const std::string fused_down =
      first_present(store, {p + "experts.down_proj", p + "experts.down_proj.weight"});
  if (!fused_gu.empty()) {
    w.layout = "fused";
    if (fused_down.empty())
      fail("checkpoint {}: {} is present but {}experts.down_proj is missing", store.dir().string(),
           fused_gu, p);
    const Tensor gu = take_stacked(store, fused_gu, {E, 2 * I, H}, cfg);
    const Tensor dn = take_stacked(store, fused_down, {E, H, I}, cfg);
    for (int64_t e = 0; e < E; ++e) {
      const Tensor gate_up = expert_matrix(gu, e);  // [2I, H], gate rows first
      w.gate[size_t(e)] = gate_up.slice_rows(0, I);
      w.up[size_t(e)] = gate_up.slice_rows(I, 2 * I);
      w.down[size_t(e)] = expert_matrix(dn, e);
    }
  } else if (store.contains(p + "switch_mlp.gate_proj.weight")) {
    w.layout = "switch_mlp";
    const Tensor g = take_stacked(store, p + "switch_mlp.gate_proj.weight", {E, I, H}, cfg);
    const Tensor u = take_stacked(store, p + "switch_mlp.up_proj.weight", {E, I, H}, cfg);
    const Tensor d = take_stacked(store, p + "switch_mlp.down_proj.weight", {E, H, I}, cfg);
    for (int64_t e = 0; e < E; ++e) {
      w.gate[size_t(e)] = expert_matrix(g, e);
      w.up[size_t(e)] = expert_matrix(u, e);
      w.down[size_t(e)] = expert_matrix(d, e);
    }
  } else {
    w.layout = "per-expert";
    if (!store.contains(p + "experts.0.gate_proj.weight"))
      fail(
          "checkpoint {}: no experts for {} (looked for {}experts.gate_up_proj, "
          "{}switch_mlp.gate_proj.weight and {}experts.0.gate_proj.weight)",
          store.dir().string(), p, p, p, p);
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + "experts." + std::to_string(e) + ".";
      w.gate[size_t(e)] = store.take(q + "gate_proj.weight", {I, H}, cfg);
      w.up[size_t(e)] = store.take(q + "up_proj.weight", {I, H}, cfg);
      w.down[size_t(e)] = store.take(q + "down_proj.weight", {H, I}, cfg);
      check_linear_dtype(w.gate[size_t(e)], q + "gate_proj.weight");
      check_linear_dtype(w.up[size_t(e)], q + "up_proj.weight");
      check_linear_dtype(w.down[size_t(e)], q + "down_proj.weight");
    }
  }
  if (s.n_ff_shared > 0) {
    const int64_t Is = s.n_ff_shared;
    const std::string sc = "shared_expert_intermediate_size, hidden_size";
    w.shared_gate = store.take(p + "shared_expert.gate_proj.weight", {Is, H}, sc);
    w.shared_up = store.take(p + "shared_expert.up_proj.weight", {Is, H}, sc);
    w.shared_down = store.take(p + "shared_expert.down_proj.weight", {H, Is}, sc);
    if (s.shared_expert_gate)
      w.shared_expert_gate = store.take(p + "shared_expert_gate.weight", {1, H}, "hidden_size");
  }
  return w;
}

void MoeBlock::reserve(Backend& be, int64_t n, const MoeShape& s) {
  if (n <= capacity_) return;
  auto rows = [&](int64_t count, int64_t cols) {
    return be.alloc(size_t(count * cols) * dtype_size(be.activation_dtype()));
  };
  const int64_t k = std::min(s.n_expert_used, s.n_expert);
  const int64_t routed = be.moe_scratch_rows(n, k);
  // Router logits in f32 whatever the activation dtype: the top-k choice is a comparison, and
  // a bf16 rounding could swap two close experts against the reference.
  logits_ = be.alloc(size_t(n * s.n_expert) * sizeof(float));
  xg_ = rows(routed, s.n_embd);
  gate_ = rows(routed, s.n_ff_expert);
  up_ = rows(routed, s.n_ff_expert);
  eo_ = rows(routed, s.n_embd);
  ids_ = be.alloc(size_t(n * k) * sizeof(int32_t));
  wts_ = be.alloc(size_t(n * k) * sizeof(float));
  if (s.n_ff_shared > 0) {
    sh_gate_ = rows(n, s.n_ff_shared);
    sh_up_ = rows(n, s.n_ff_shared);
    sh_out_ = rows(n, s.n_embd);
    sh_logit_ = rows(n, 1);
  }
  capacity_ = n;
}

void MoeBlock::forward(Backend& be, const Tensor& y, const Tensor& x, const MoeWeights& w,
                       const MoeShape& s) {
  const int64_t n = x.rows(), E = s.n_expert, H = s.n_embd, I = s.n_ff_expert;
  const int64_t k = std::min(s.n_expert_used, E);
  reserve(be, n, s);
  const Tensor logits = logits_.view(DType::F32, {n, E});
  be.linear(logits, x, w.router, Tensor());
  const DType adt = be.activation_dtype();
  const Backend::MoeExperts experts{w.gate.data(),    w.up.data(), w.down.data(), E,         k,
                                    s.norm_topk_prob, s.act,       w.held_begin,  w.held_end};
  const int64_t rows = be.moe_scratch_rows(n, k);
  const Backend::MoeScratch scratch{xg_.view(adt, {rows, H}),      gate_.view(adt, {rows, I}),
                                    up_.view(adt, {rows, I}),      eo_.view(adt, {rows, H}),
                                    ids_.view(DType::I32, {n, k}), wts_.view(DType::F32, {n, k})};
  // A rank's part of the experts: the composed form, the one that honours the held range.
  last_active_ = w.held_end < 0 ? be.moe_experts(y, x, logits, experts, scratch)
                                : be.Backend::moe_experts(y, x, logits, experts, scratch);
  if (s.n_ff_shared > 0) {
    const Tensor g = sh_gate_.view(be.activation_dtype(), {n, s.n_ff_shared});
    const Tensor u = sh_up_.view(be.activation_dtype(), {n, s.n_ff_shared});
    const Tensor o = sh_out_.view(be.activation_dtype(), {n, H});
    be.linear(g, x, w.shared_gate, Tensor());
    be.linear(u, x, w.shared_up, Tensor());
    be.glu(g, g, u, s.act);
    be.linear(o, g, w.shared_down, Tensor());
    if (!w.shared_expert_gate.empty()) {
      const Tensor gl = sh_logit_.view(be.activation_dtype(), {n, 1});
      be.linear(gl, x, w.shared_expert_gate, Tensor());
      be.mul_sigmoid(o, o, gl);
    }
    be.add(y, y, o);
  }
}

}  // namespace hearth
