// Backend: the fixed set of ops that model code calls. Model code never names a device or a
// weight format; a backend picks the kernel from the tensors' dtypes (and, later, quant formats).
// Activations on the CPU backend are f32; weights are read in their stored dtype.
// All ops take views; outputs are written in full (never accumulated into), except where a
// comment says otherwise. Ops do not throw on the hot path: shapes are checked by the model.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/device_buffer.h"
#include "core/tensor.h"

namespace hearth {

enum class Activation : uint8_t { Silu, GeluTanh, Gelu };

// One layer's cached keys and values; valid positions are [first, end). Two layouts:
// - paged (blocks != nullptr): position p's key row lives in block blocks[p / block_size] at
//   byte k_offset + (p % block_size) * row_bytes, its value row at v_offset + the same; a block
//   table entry below first's block may be null (freed). KvCache's views are these; the CUDA
//   backend reads only these.
// - a ring (blocks == nullptr): position p lives in row p % capacity of k and v. The CPU ops
//   read it too, so their tests can lay out a cache by hand.
struct KvView {
  Tensor k;              // ring: [capacity, n_head_kv * head_dim], the backend's activation dtype
  Tensor v;              // ring: [capacity, n_head_kv * head_dim]
  int64_t capacity = 0;  // ring: rows of k and v
  int64_t first = 0;
  int64_t end = 0;
  std::byte* const* blocks = nullptr;  // paged: the block table (host memory)
  int64_t block_size = 0;              // paged: positions a block holds
  int64_t k_offset = 0, v_offset = 0;  // paged: this layer's keys and values in a block
  int64_t row_bytes = 0;               // paged: n_head_kv * head_dim elements

  bool paged() const { return blocks != nullptr; }
  // Calls f(p, count, key_rows, value_rows) for consecutive runs of positions [lo, lo + n):
  // `count` rows from position p lie back to back from key_rows (value_rows), row_bytes apart.
  template <class F>
  void for_each_run(int64_t lo, int64_t n, F&& f) const {
    const int64_t span = paged() ? block_size : capacity;
    const int64_t rb = paged() ? row_bytes : int64_t(k.nbytes()) / capacity;
    for (int64_t p = lo, last = lo + n; p < last;) {
      const int64_t at = p % span, count = std::min(last - p, span - at);
      std::byte* kb = paged() ? blocks[p / block_size] + k_offset : static_cast<std::byte*>(k.data);
      std::byte* vb = paged() ? blocks[p / block_size] + v_offset : static_cast<std::byte*>(v.data);
      f(p, count, kb + at * rb, vb + at * rb);
      p += count;
    }
  }
};

struct AttentionParams {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 1.0f;    // multiplies q·k
  float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap)
  int window = 0;        // > 0: a query at position q sees keys at positions > q - window
};

// Rotary embedding for one forward: inv_freq has rotary_dim/2 entries (already scaled by the
// model's rope scaling); cos and sin are multiplied by attention_factor (yarn's mscale).
// Pairs are (i, i + rotary_dim/2) — the rotate_half convention of Hugging Face.
struct RopeParams {
  const float* inv_freq = nullptr;
  int rotary_dim = 0;
  float attention_factor = 1.0f;
};

// Gated DeltaNet shapes (Qwen3.5 / Qwen3-Next linear attention). Value head h reads key head
// h / (n_v_heads / n_k_heads) (transformers' repeat_interleave grouping).
struct GatedDeltaParams {
  int n_k_heads = 0, n_v_heads = 0, k_dim = 0, v_dim = 0;
  // Prefill form: false = token-by-token recurrence, true = chunked (WY / triangular solve,
  // chunks of `chunk` tokens counted from the first token of the call, as transformers does).
  bool chunked = false;
  int chunk = 64;
};

// How to pick the next token from a row of logits once the host-only steps (penalties, logit
// bias) are done: temperature <= 0 is argmax (ties: lowest id); otherwise temperature, top-k,
// top-p, min-p in Hugging Face's order, then a draw at u · (mass of the survivors), u in [0, 1).
struct TokenPick {
  float temperature = 0.0f;
  int32_t top_k = 0;   // 0 = off
  float top_p = 1.0f;  // 1 = off
  float min_p = 0.0f;  // 0 = off
  double u = 0.0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // Dtype of activations and KV caches this backend computes in (CPU: F32; CUDA: BF16).
  virtual DType activation_dtype() const = 0;
  // Memory for activations, caches and converted weights; throws hearth::Error when exhausted.
  virtual DeviceBuffer alloc(size_t bytes) = 0;
  // Memory free for alloc() now (the CPU: the kernel's MemAvailable); 0 when unknown.
  virtual size_t memory_available() const { return 0; }
  // Makes a checkpoint tensor (host view into the mapped file) usable by this backend's ops:
  // the CPU reads it in place; a GPU backend uploads it once and owns the copy.
  virtual Tensor prepare_weight(const Tensor& host) = 0;
  // prepare_weight for matrices of the same columns that always multiply the same input (q, k
  // and v; gate and up): out[i] is host[i] prepared. A backend may keep them as consecutive row
  // ranges of one matrix, so that its products of many rows run them as one (the CUDA backend);
  // the default prepares each alone.
  virtual void prepare_weights_stacked(const Tensor* host, int n, Tensor* out);
  // dst = src: same device, dtype and size.
  virtual void copy(const Tensor& dst, const Tensor& src) = 0;
  // Copies host memory into a tensor of this backend.
  virtual void copy_from_host(const Tensor& dst, const void* src) = 0;

  // y[n, out] = x[n, in] · w[out, in]ᵀ (+ bias[out] when bias is non-empty). y is in the
  // activation dtype or F32 (logits).
  virtual void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) = 0;
  // y[i] = table[ids[i]] * scale, converted to the activation dtype.
  virtual void embedding(const Tensor& y, const Tensor& table, const int32_t* ids, float scale) = 0;
  // Per row of the innermost dimension: y = x / sqrt(mean(x²) + eps) * (w + weight_offset).
  // w's length may divide x's row length (per-head norms); y may alias x.
  virtual void rms_norm(const Tensor& y, const Tensor& x, const Tensor& w, float eps,
                        float weight_offset) = 0;
  // In place on x [n_tokens, n_heads, head_dim]: rotates the first rotary_dim of every head.
  virtual void rope(const Tensor& x, const int32_t* positions, const RopeParams& rope) = 0;
  // Writes k, v [n_tokens, n_head_kv, head_dim] into the cache slots of their positions.
  virtual void kv_store(const KvView& kv, const Tensor& k, const Tensor& v,
                        const int32_t* positions) = 0;
  // out[n_tokens, n_head, head_dim] = causal softmax attention of q over the cache.
  virtual void attention(const Tensor& out, const Tensor& q, const KvView& kv,
                         const int32_t* positions, const AttentionParams& params) = 0;
  // y = act(gate) * up, elementwise; y may alias gate or up.
  virtual void glu(const Tensor& y, const Tensor& gate, const Tensor& up, Activation act) = 0;
  // y = a + b * b_scale, elementwise; y may alias a.
  virtual void add(const Tensor& y, const Tensor& a, const Tensor& b, float b_scale = 1.0f) = 0;
  // x *= s, elementwise, in place.
  virtual void scale(const Tensor& x, float s) = 0;
  // x = softcap * tanh(x / softcap), in place.
  virtual void softcap(const Tensor& x, float softcap) = 0;
  // Copies a tensor to host f32 (logits out of the device); waits for pending work.
  virtual void to_host_f32(float* dst, const Tensor& src) = 0;

  // --- Gated DeltaNet and mixture-of-experts (Qwen3.5 / Qwen3-Next / Qwen3-MoE) ---
  // Causal depthwise conv1d + SiLU over [state ‖ x]: y, x [n_tokens, C]; w [K, C] f32 (tap j of
  // channel c at w[j, c]; tap K-1 multiplies the current token); state [K-1, C] f32 holds the
  // previous K-1 inputs and is updated in place to the last K-1 rows of [state ‖ x].
  virtual void conv1d_causal_silu(const Tensor& y, const Tensor& x, const Tensor& state,
                                  const Tensor& w) = 0;
  // g = -exp(a_log) * softplus(a + dt_bias), beta = sigmoid(b): all [n_tokens, n_v_heads] f32,
  // a_log and dt_bias [n_v_heads] f32.
  virtual void gated_delta_gates(const Tensor& g, const Tensor& beta, const Tensor& a,
                                 const Tensor& b, const Tensor& a_log, const Tensor& dt_bias) = 0;
  // The gated delta rule over n_tokens. qkv [n_tokens, 2*Hk*Dk + Hv*Dv] holds q | k | v (after
  // the conv); q and k are L2-normalised here (eps 1e-6) and q scaled by Dk^-1/2.
  // out [n_tokens, Hv, Dv]; state [Hv, Dk, Dv] f32, read and updated in place.
  virtual void gated_delta(const Tensor& out, const Tensor& qkv, const Tensor& g,
                           const Tensor& beta, const Tensor& state,
                           const GatedDeltaParams& params) = 0;
  // y = rms_norm(x) * w * silu(z) per row of w's length (x, z, y [n, H*D], w [D]); y may alias x.
  virtual void rms_norm_gated(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& z,
                              float eps) = 0;
  // y = x * sigmoid(gate); gate has x's shape, or one column per row (broadcast). y may alias x.
  virtual void mul_sigmoid(const Tensor& y, const Tensor& x, const Tensor& gate) = 0;
  // y = value everywhere.
  virtual void fill(const Tensor& y, float value) = 0;
  // y[i] = x[rows[i]] for i < y.rows() (gathering the tokens routed to one expert).
  virtual void gather_rows(const Tensor& y, const Tensor& x, const int32_t* rows) = 0;
  // y[rows[i]] += weights[i] * x[i] for i < x.rows() (accumulates: the MoE scatter-add).
  virtual void scatter_add_rows(const Tensor& y, const Tensor& x, const int32_t* rows,
                                const float* weights) = 0;

  // --- mixture of experts (optional; the default composes the ops above, backend.cpp) ---
  // One MoE layer's routed experts: n_expert matrices each (views; separate allocations or
  // slices of one stacked tensor), gate/up [I, H], down [H, I].
  struct MoeExperts {
    const Tensor* gate = nullptr;
    const Tensor* up = nullptr;
    const Tensor* down = nullptr;
    int64_t n_expert = 0, n_used = 0;  // E, k (k ≤ E)
    bool norm_topk_prob = false;
    Activation act = Activation::Silu;
    // Expert parallelism (a tensor-parallel rank): only experts [held_begin, held_end) are
    // given (the others' entries may be empty) and only their (token, expert) pairs computed, so
    // y holds their part of the sum; routing still sees all E. held_end -1: every expert. Only
    // the composed form (Backend::moe_experts, which a rank calls by name) honours it.
    int64_t held_begin = 0, held_end = -1;
  };
  // Working memory for moe_experts, owned by the caller, for n tokens routed to k experts each.
  // Row buffers are in the activation dtype and hold moe_scratch_rows(n, k) rows.
  struct MoeScratch {
    Tensor xg;    // [rows, H] routed input rows
    Tensor gate;  // [rows, I] gate products, then act(gate) ⊙ up
    Tensor up;    // [rows, I]
    Tensor out;   // [rows, H] expert outputs
    // Where a backend routes on the device it leaves the routing here (the composed form
    // routes on the host and does not touch them):
    Tensor ids;      // [n, k] I32: the chosen experts, best first
    Tensor weights;  // [n, k] F32: their routing weights
  };
  // y[t] = Σ_j w_tj · down_e(act(gate_e · x_t) ⊙ (up_e · x_t)) over the k experts e = e_tj with
  // the highest softmax(router_logits[t]) (f32 [n, E]; ties → lower expert index), w_tj their
  // probabilities, divided by the k probabilities' sum when norm_topk_prob. y [n, H] is written
  // (not accumulated) and must not alias x. Returns how many distinct experts ran; a backend
  // that routes on the device without telling the host returns min(E, n·k) (an upper bound).
  virtual int64_t moe_experts(const Tensor& y, const Tensor& x, const Tensor& router_logits,
                              const MoeExperts& experts, const MoeScratch& scratch);
  // Rows moe_experts needs in the scratch's row buffers for n tokens and k experts each: n for
  // the composed form (one expert's rows at a time); a backend that gives every (token, slot)
  // pair its own row (the CUDA grouped path) says n·k.
  virtual int64_t moe_scratch_rows(int64_t n_tokens, int64_t k) const {
    (void)k;
    return n_tokens;
  }

  // --- Gated DeltaNet mixer (optional; the default composes the ops above, backend.cpp) ---
  // Working memory for gated_delta_mixer, owned by the caller: the composed form's
  // intermediates, each f32 (or any float dtype; a fused form rounds where they would be stored).
  struct GatedDeltaScratch {
    Tensor conv;  // [n_tokens, C] the conv's output (q | k | v)
    Tensor g;     // [n_tokens, n_v_heads]
    Tensor beta;  // [n_tokens, n_v_heads]
    Tensor core;  // [n_tokens, n_v_heads * v_dim] the delta rule's output
  };
  // A linear-attention layer's token mixer after its input projections, in one call:
  //   conv1d_causal_silu(conv, qkv, conv_state, conv_w);
  //   gated_delta_gates(g, beta, a, b, a_log, dt_bias);
  //   gated_delta(core, conv, g, beta, state, params);
  //   rms_norm_gated(normed, core, norm_w, z, eps);
  // with the shapes those ops document (C = 2*Hk*Dk + Hv*Dv, norm_w [Dv]); both states are
  // updated in place. normed [n_tokens, Hv*Dv] may alias scratch.core. The default runs the four
  // ops, so the CPU is unchanged; a backend that does it in one pass (the CUDA decode kernel)
  // need not write the scratch, and differs from the composed form by accumulation order only.
  virtual void gated_delta_mixer(const Tensor& normed, const Tensor& qkv, const Tensor& conv_state,
                                 const Tensor& conv_w, const Tensor& a, const Tensor& b,
                                 const Tensor& a_log, const Tensor& dt_bias, const Tensor& state,
                                 const GatedDeltaParams& params, const Tensor& norm_w,
                                 const Tensor& z, float eps, const GatedDeltaScratch& scratch);

  // --- fused ops (optional): the defaults compose the ops above (backend.cpp); a backend
  // overrides one where doing it in one pass saves launches or memory traffic (CUDA decode). ---
  // outs[i].y = x · outs[i].wᵀ + outs[i].bias for i < n_outs: several products of one input
  // (q, k and v), which a GEMV can stream as one matrix. (No std::span: CUDA code includes
  // this header as C++17.)
  struct LinearOut {
    Tensor y, w, bias;
  };
  // The RMSNorm a product's input still needs: the op reads x un-normalised and multiplies
  // rms_norm(x) * (w + offset), row by row. The composed form writes the normalised rows to
  // `scratch` (x's shape, activation dtype) first; a backend that folds the norm into the
  // product (the CUDA GEMV) leaves scratch alone. Lets a block's residual add end in x and the
  // next block's norm happen inside its first product, with no separate pass in between.
  struct InputNorm {
    Tensor w;
    float eps = 0.0f;
    float offset = 0.0f;
    Tensor scratch;
  };
  virtual void linear_many(const Tensor& x, const LinearOut* outs, int n_outs,
                           const InputNorm* norm);
  // y = act(x · gateᵀ + gate_bias) * (x · upᵀ + up_bias), x normalised first when norm is set.
  // up_scratch [n, n_ff] may be overwritten (the composed form needs it); y may not alias x.
  virtual void linear_glu(const Tensor& y, const Tensor& up_scratch, const Tensor& x,
                          const LinearOut& gate, const LinearOut& up, Activation act,
                          const InputNorm* norm);
  // x += (in · proj.wᵀ + proj.bias) * scale: the product that ends a residual block, added
  // where the composed form would add proj.y (rounded to x's dtype first). proj.y ([n, out])
  // receives the product in the composed form; a fusing backend may leave it unwritten.
  virtual void linear_residual(const Tensor& x, const Tensor& in, const LinearOut& proj,
                               float scale);
  // The attention input step: per-head RMSNorm of q and k (when q_norm/k_norm are non-empty),
  // rope on q and k (when rope is non-null), then k and v into the cache at their positions.
  virtual void qk_norm_rope_store(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& q_norm, const Tensor& k_norm, float eps,
                                  float weight_offset, const RopeParams* rope, const KvView& kv,
                                  const int32_t* positions);

  // --- the decode rows of several sequences in one call (optional; the defaults go row by row) ---
  // Row r of q, k, v ([n, heads, head_dim]) and out is the next token of the sequence whose
  // cache is kvs[r] (n views), at positions[r]: the same as qk_norm_rope_store and attention
  // called on each row alone, so a step of many sequences costs one launch, not one per row.
  virtual void qk_norm_rope_store_rows(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& q_norm, const Tensor& k_norm, float eps,
                                       float weight_offset, const RopeParams* rope,
                                       const KvView* kvs, const int32_t* positions);
  virtual void attention_rows(const Tensor& out, const Tensor& q, const KvView* kvs,
                              const int32_t* positions, const AttentionParams& params);
  // gated_delta_mixer for one token of each of n sequences: row r of qkv, a, b, z, normed and
  // the scratch is sequence r's, whose conv and recurrent states are conv_states[r] and
  // states[r] (n each).
  virtual void gated_delta_mixer_rows(const Tensor& normed, const Tensor& qkv,
                                      const Tensor* conv_states, const Tensor& conv_w,
                                      const Tensor& a, const Tensor& b, const Tensor& a_log,
                                      const Tensor& dt_bias, const Tensor* states,
                                      const GatedDeltaParams& params, const Tensor& norm_w,
                                      const Tensor& z, float eps, const GatedDeltaScratch& scratch);
  // dst[r] = the token picks[r] chooses from row r of logits ([m, n_vocab] f32), as pick_token
  // would for each row; complete on return.
  virtual void pick_tokens(int32_t* dst, const Tensor& logits, const TokenPick* picks);

  // A whole one-token decode step of a plain llama-family stack, or of a Qwen3.5 hybrid stack with
  // dense MLPs, in one pass: per layer
  //   x += o(attention(rope(norm_q(q)), rope(norm_k(k)), v) [⊙ sigmoid(out_gate)])
  //        with q|k|v|out_gate = (rms_norm(x) · w)           (an attention layer), or
  //   x += o(gated_delta_mixer(rms_norm(x) · in_qkv|in_z|in_b|in_a))   (a Gated DeltaNet layer)
  //   x += down(act(gate · rms_norm(x)) ⊙ (up · rms_norm(x)))
  // (no biases, no sliding window or softcap, rope over the first rotary_dim dims of each head,
  // the new k and v stored at `position` of each attention layer's cache; a Gated DeltaNet layer
  // updates its conv and recurrent states as gated_delta_mixer does, with f32 products in and
  // f32 arithmetic to the gated norm). The same arithmetic as the ops the model would call
  // (linear_many with its InputNorm, qk_norm_rope_store, attention, mul_sigmoid,
  // gated_delta_mixer, linear_residual, linear_glu, linear_residual), up to accumulation order.
  // Optional: returns false when the backend does not take it (the default; the CPU), and the
  // model runs those ops instead.
  struct DecodeLayer {
    Tensor attn_norm, q, k, v, q_norm, k_norm, o;  // q_norm/k_norm: [head_dim] or empty
    Tensor ffn_norm, gate, up, down;
    KvView kv;
    Tensor out_gate;  // attention layers: [n_head·head_dim, hidden] output gate rows, or empty
    // A Gated DeltaNet layer when in_qkv is set: then q, k, v, the q/k norms and kv are unused
    // and o is the out projection. Shapes as gated_delta_mixer takes them; conv_state [K-1, C]
    // and state [Hv, Dk, Dv] f32, updated in place.
    Tensor in_qkv, in_z, in_b, in_a;
    Tensor conv_w, a_log, dt_bias, lin_norm, conv_state, state;
  };
  struct DecodeLayers {
    const DecodeLayer* layers = nullptr;
    int n_layers = 0;
    Tensor x;  // [1, hidden] residual stream, updated in place
    int32_t position = 0;
    int n_head = 0, n_head_kv = 0, head_dim = 0;
    float eps = 0.0f, norm_offset = 0.0f, attn_scale = 1.0f;
    RopeParams rope;  // rotary_dim <= head_dim, or 0 for none
    Activation act = Activation::Silu;
    GatedDeltaParams gdn;  // the Gated DeltaNet layers' shapes (none: all zero)
  };
  virtual bool decode_layers(const DecodeLayers& step) {
    (void)step;
    return false;
  }

  // *dst = the token `pick` chooses from logits [n_vocab] f32 (in this backend's memory, or
  // host memory). A GPU backend picks on the device so only the id crosses to the host; *dst is
  // written when to_host_f32 / end_step would have delivered logits.
  virtual void pick_token(int32_t* dst, const Tensor& logits, const TokenPick& pick);

  // --- picking ahead (optional) ---
  // pick_token_ahead is pick_token without the wait: the step ends with its token still where it
  // was picked, so the host can record and launch the next step while this one runs.
  // take_picked_token() returns the oldest such token not yet taken, waiting for it.
  // embedding_of_pick(y, table, scale) is embedding() of the token the last pick_token_ahead
  // picked, read where it lies (on a GPU it need not reach the host before the next step
  // starts). Only a backend whose picks_ahead() is true takes them (the defaults fail): elsewhere
  // Model::queue_pick runs each step at once and keeps the ids on the host.
  virtual bool picks_ahead() const { return false; }
  virtual void pick_token_ahead(const Tensor& logits, const TokenPick& pick);
  virtual int32_t take_picked_token();
  virtual void embedding_of_pick(const Tensor& y, const Tensor& table, float scale);

  // --- step hooks (optional; the CPU backend ignores them) ---
  // Bracket one forward pass of n_tokens rows. Between them a backend may defer work: the CUDA
  // backend records steps of 1-8 tokens and replays each as a CUDA graph (one per size). Everything
  // the step wrote to host memory (to_host_f32, a linear whose output is host memory) is
  // complete when to_host_f32 / end_step returns.
  virtual void begin_step(int64_t n_tokens) { (void)n_tokens; }
  // begin_step for a step of n_tokens rows of n_sequences sequences, whose caches reach the ops
  // as tables (the CUDA backend records the step when every sequence has one token, one graph
  // per sequence count). The sequences' caches hold their rows already (reserved before).
  virtual void begin_batch_step(int64_t n_tokens, int64_t n_sequences) {
    (void)n_sequences;
    begin_step(n_tokens);
  }
  virtual void end_step() {}
};

// keep_weights_mapped: read weights in place from the mapped checkpoint instead of copying them
// into huge-page memory (see cpu_backend.cpp).
// batch_invariant: every row's result independent of the other rows of the product and of how
// a prompt is chunked (row kernels at every row count, attention one query at a time).
// n_threads: 0 runs the ops on the process-wide pool (ThreadPool::global()); more gives the
// backend a pool of its own of that many threads, its caller being one (a tensor-parallel rank's
// share of the cores).
std::unique_ptr<Backend> make_cpu_backend(bool keep_weights_mapped = true,
                                          bool batch_invariant = false, int n_threads = 0);

}  // namespace hearth
