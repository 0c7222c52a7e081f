// The composed forms of the Backend's optional fused ops: correct on any backend, one op after
// another. Backends that can do better override them (the CUDA backend for decode).
#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/expert_rows.h"
#include "backend/token_pick.h"
#include "core/error.h"

namespace hearth {

void Backend::prepare_weights_stacked(const Tensor* host, int n, Tensor* out) {
  for (int i = 0; i < n; ++i) out[i] = host[i].empty() ? Tensor() : prepare_weight(host[i]);
}

void Backend::linear_many(const Tensor& x, const LinearOut* outs, int n_outs,
                          const InputNorm* norm) {
  if (norm) {  // normalise into scratch, then this backend's own plain form
    rms_norm(norm->scratch, x, norm->w, norm->eps, norm->offset);
    return linear_many(norm->scratch, outs, n_outs, nullptr);
  }
  for (int i = 0; i < n_outs; ++i) linear(outs[i].y, x, outs[i].w, outs[i].bias);
}

void Backend::linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x,
                         const LinearOut& gate, const LinearOut& up, Activation act,
                         const InputNorm* norm) {
  if (norm) {
    rms_norm(norm->scratch, x, norm->w, norm->eps, norm->offset);
    return linear_glu(y, up_scratch, norm->scratch, gate, up, act, nullptr);
  }
  linear(y, x, gate.w, gate.bias);
  linear(up_scratch, x, up.w, up.bias);
  glu(y, y, up_scratch, act);
}

void Backend::linear_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                              float scale) {
  linear(proj.y, in, proj.w, proj.bias);
  add(x, x, proj.y, scale);
}

void Backend::qk_norm_rope_store(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& q_norm, const Tensor& k_norm, float eps,
                                 float weight_offset, const RopeParams* rope, const KvView& kv,
                                 const int32_t* positions) {
  if (!q_norm.empty()) rms_norm(q, q, q_norm, eps, weight_offset);
  if (!k_norm.empty()) rms_norm(k, k, k_norm, eps, weight_offset);
  if (rope) {
    this->rope(q, positions, *rope);
    this->rope(k, positions, *rope);
  }
  kv_store(kv, k, v, positions);
}

void Backend::qk_norm_rope_store_rows(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& q_norm, const Tensor& k_norm, float eps,
                                      float weight_offset, const RopeParams* rope,
                                      const KvView* kvs, const int32_t* positions) {
  for (int64_t r = 0; r < q.dim(0); ++r)
    qk_norm_rope_store(q.slice_rows(r, r + 1), k.slice_rows(r, r + 1), v.slice_rows(r, r + 1),
                       q_norm, k_norm, eps, weight_offset, rope, kvs[r], positions + r);
}

void Backend::attention_rows(const Tensor& out, const Tensor& q, const KvView* kvs,
                             const int32_t* positions, const AttentionParams& params) {
  for (int64_t r = 0; r < q.dim(0); ++r)
    attention(out.slice_rows(r, r + 1), q.slice_rows(r, r + 1), kvs[r], positions + r, params);
}

void Backend::gated_delta_mixer_rows(const Tensor& normed, const Tensor& qkv,
                                     const Tensor* conv_states, const Tensor& conv_w,
                                     const Tensor& a, const Tensor& b, const Tensor& a_log,
                                     const Tensor& dt_bias, const Tensor* states,
                                     const GatedDeltaParams& params, const Tensor& norm_w,
                                     const Tensor& z, float eps, const GatedDeltaScratch& s) {
  for (int64_t r = 0; r < qkv.dim(0); ++r) {
    auto row = [r](const Tensor& t) { return t.slice_rows(r, r + 1); };
    gated_delta_mixer(row(normed), row(qkv), conv_states[r], conv_w, row(a), row(b), a_log, dt_bias,
                      states[r], params, norm_w, row(z), eps,
                      {row(s.conv), row(s.g), row(s.beta), row(s.core)});
  }
}

void Backend::pick_tokens(int32_t* dst, const Tensor& logits, const TokenPick* picks) {
  for (int64_t r = 0; r < logits.dim(0); ++r)
    pick_token(dst + r, logits.slice_rows(r, r + 1).reshaped({logits.dim(1)}), picks[r]);
}

void Backend::gated_delta_mixer(const Tensor& normed, const Tensor& qkv, const Tensor& conv_state,
                                const Tensor& conv_w, const Tensor& a, const Tensor& b,
                                const Tensor& a_log, const Tensor& dt_bias, const Tensor& state,
                                const GatedDeltaParams& params, const Tensor& norm_w,
                                const Tensor& z, float eps, const GatedDeltaScratch& s) {
  conv1d_causal_silu(s.conv, qkv, conv_state, conv_w);
  gated_delta_gates(s.g, s.beta, a, b, a_log, dt_bias);
  gated_delta(s.core, s.conv, s.g, s.beta, state, params);
  rms_norm_gated(normed, s.core, norm_w, z, eps);
}

namespace {

// Host routing of one token: p[E] holds its router logits and is turned into softmax
// probabilities in place; ids[k] gets the k best experts (ties → lower index), best first, and
// w[k] their probabilities (over the k's sum when norm_topk_prob), as the GPU routing does.
void moe_route_token(float* p, int64_t E, int64_t k, bool norm_topk_prob,
                     std::vector<int32_t>& order, int32_t* ids, float* w) {
  const float mx = *std::max_element(p, p + E);
  float sum = 0.0f;
  for (int64_t e = 0; e < E; ++e) sum += p[e] = std::exp(p[e] - mx);
  for (int64_t e = 0; e < E; ++e) p[e] /= sum;
  order.resize(size_t(E));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  float top_sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) top_sum += p[order[size_t(i)]];
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = order[size_t(i)];
    w[i] = norm_topk_prob ? p[ids[i]] / top_sum : p[ids[i]];
  }
}

}  // namespace

// Routing on the host (the logits come back first: a sync on a GPU), the pairs grouped by
// expert (ExpertRows, as the GPU's grouped path), then per active expert in index order: gather
// its tokens' rows, gate and up products, GLU, down product, scatter-add.
int64_t Backend::moe_experts(const Tensor& y, const Tensor& x, const Tensor& router_logits,
                             const MoeExperts& ex, const MoeScratch& s) {
  const int64_t n = x.rows(), E = ex.n_expert, H = x.cols();
  const int64_t k = std::min(ex.n_used, E);
  const int64_t held_begin = ex.held_end < 0 ? 0 : ex.held_begin;
  const int64_t held_end = ex.held_end < 0 ? E : ex.held_end;
  fill(y, 0.0f);
  if (held_end <= held_begin) return 0;  // a rank of more ranks than experts
  const int64_t I = ex.gate[size_t(held_begin)].rows();
  thread_local std::vector<float> probs, pair_w, row_w;
  thread_local std::vector<int32_t> order, ids;
  thread_local ExpertRows rows;
  probs.resize(size_t(n * E));
  to_host_f32(probs.data(), router_logits);
  ids.resize(size_t(n * k));
  pair_w.resize(size_t(n * k));
  for (int64_t t = 0; t < n; ++t)
    moe_route_token(probs.data() + t * E, E, k, ex.norm_topk_prob, order, ids.data() + t * k,
                    pair_w.data() + t * k);
  rows.group(ids.data(), n, k, E);
  row_w.resize(size_t(n * k));  // each row's routing weight, in the grouped order
  for (size_t p = 0; p < row_w.size(); ++p) row_w[size_t(rows.pos[p])] = pair_w[p];

  const DType adt = activation_dtype();
  int64_t active = 0;
  for (int64_t e = held_begin; e < held_end; ++e) {
    const int64_t lo = rows.offset[size_t(e)], m = rows.offset[size_t(e + 1)] - lo;
    if (m == 0) continue;
    ++active;
    const Tensor xg = Tensor(s.xg.data, adt, {m, H}, s.xg.device);
    const Tensor g = Tensor(s.gate.data, adt, {m, I}, s.gate.device);
    const Tensor u = Tensor(s.up.data, adt, {m, I}, s.up.device);
    const Tensor o = Tensor(s.out.data, adt, {m, H}, s.out.device);
    gather_rows(xg, x, rows.src.data() + lo);
    linear(g, xg, ex.gate[size_t(e)], Tensor());
    linear(u, xg, ex.up[size_t(e)], Tensor());
    glu(g, g, u, ex.act);
    linear(o, g, ex.down[size_t(e)], Tensor());
    scatter_add_rows(y, o, rows.src.data() + lo, row_w.data() + lo);
  }
  return active;
}

void Backend::pick_token(int32_t* dst, const Tensor& logits, const TokenPick& pick) {
  const float* row = logits.as<float>();
  if (logits.device != Device::CPU) {  // a backend without its own picker: via the host
    thread_local std::vector<float> host;
    host.resize(size_t(logits.numel()));
    to_host_f32(host.data(), logits);
    row = host.data();
  }
  thread_local std::vector<std::pair<float, int32_t>> scratch;
  *dst = pick_token_host(std::span<const float>(row, size_t(logits.numel())), pick, scratch);
}

void Backend::pick_token_ahead(const Tensor&, const TokenPick&) {
  fail("backend '{}' does not pick ahead (picks_ahead() is false)", name());
}

int32_t Backend::take_picked_token() {
  fail("backend '{}' does not pick ahead (picks_ahead() is false)", name());
}

void Backend::embedding_of_pick(const Tensor&, const Tensor&, float) {
  fail("backend '{}' does not pick ahead (picks_ahead() is false)", name());
}

}  // namespace hearth
