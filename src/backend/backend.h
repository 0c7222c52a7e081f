// Backend: the fixed set of ops that model code calls. Model code never names a device or a
// weight format; a backend picks the kernel from the tensors' dtypes (and, later, quant formats).
// Activations on the CPU backend are f32; weights are read in their stored dtype.
// All ops take views; outputs are written in full (never accumulated into), except where a
// comment says otherwise. Ops do not throw on the hot path: shapes are checked by the model.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace hearth {

enum class Activation : uint8_t { Silu, GeluTanh, Gelu };

// One layer's cached keys and values, addressed as a ring: position p lives in slot
// p % capacity. Valid positions are [first, end).
struct KvView {
  Tensor k;  // [capacity, n_head_kv, head_dim] f32
  Tensor v;  // [capacity, n_head_kv, head_dim] f32
  int64_t capacity = 0;
  int64_t first = 0;
  int64_t end = 0;
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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // y[n, out] = x[n, in] · w[out, in]ᵀ (+ bias[out] when bias is non-empty).
  virtual void linear(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) = 0;
  // y[i] = table[ids[i]] * scale, converted to the activation dtype.
  virtual void embedding(const Tensor& y, const Tensor& table, const int32_t* ids,
                         float scale) = 0;
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
  // Copies a tensor to host f32 (logits out of the device).
  virtual void to_host_f32(float* dst, const Tensor& src) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace hearth
