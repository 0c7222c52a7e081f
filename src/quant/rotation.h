// An offline rotation of a model's residual stream (QuaRot-style, as mlx-bun folds it for
// trellis): R = diag(±1) · H_b/√b, block-diagonal over the hidden dimension n with b the
// largest power of two >= 64 dividing n (b = n when n is one), the signs from a seed. R is
// orthogonal, so a model whose every residual writer is replaced by Rᵀ·W, every reader by W·R
// (after the RMSNorm gains feeding it are folded into its columns) and the embedding rows by E·R
// computes the same function: RMSNorm(x·R) = RMSNorm(x)·R once the gains are 1. Nothing is left
// for the runtime to do. Rotated weights are more incoherent (no outlier columns), which is what
// trellis and low-bit affine codes want.
//
// This file holds the transform and the per-tensor plan; quantize_checkpoint applies it while
// writing a checkpoint (format "none" writes the rotated float checkpoint alone).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loader/weight_store.h"

namespace hearth::quant {

struct RotationSpec {
  uint64_t seed = 0;
  // What the residual-stream norms add to their stored gains: 1 for (1 + w) norms (Qwen3.5
  // family and gemma in Hugging Face layout), else 0. The models layer knows it per checkpoint
  // (models/rotation_support.h); after folding, the gains are set to 1 - norm_offset.
  float norm_offset = 0.0f;
};

// The largest power-of-two block >= 64 dividing n (n itself when it is a power of two), or 0 when
// there is none and n cannot be rotated.
int64_t rotation_block(int64_t n);

class HiddenRotation {
 public:
  // Throws hearth::Error when n has no usable block (see rotation_block).
  HiddenRotation(int64_t n, uint64_t seed);
  int64_t size() const { return n_; }
  int64_t block() const { return block_; }
  uint64_t seed() const { return seed_; }
  const std::vector<float>& signs() const { return signs_; }

  // x ← x·R for each of `rows` rows of n values (readers' rows, embedding rows, a bias as Rᵀ·b).
  void apply_rows(float* x, int64_t rows) const;
  // w ← Rᵀ·w for w [n, cols] row-major (residual writers).
  void apply_transposed(float* w, int64_t cols) const;

 private:
  int64_t n_, block_;
  uint64_t seed_;
  std::vector<float> signs_;  // ±1, [n]
};

enum class RotationRole : uint8_t {
  Keep,        // untouched (inside a block: q/k norms, conv, biases of readers, vision tower)
  Embedding,   // E [vocab, n] ← E·R
  Reader,      // W [out, n] ← (W·diag(gain + offset))·R
  Writer,      // W [n, in] ← Rᵀ·W
  WriterBias,  // b [n] ← Rᵀ·b
  Norm,        // gain [n] ← identity (1 - offset)
};

struct RotatedTensor {
  std::string name;          // in the output
  const TensorInfo* source;  // the input tensor it is computed from
  RotationRole role = RotationRole::Keep;
  const TensorInfo* gain = nullptr;  // Reader: the norm gain folded into its columns, if any
};

struct RotationPlan {
  int64_t hidden = 0;
  std::vector<RotatedTensor> tensors;  // the output's tensors, in name order
  bool untied = false;  // no lm_head (tied embeddings): lm_head.weight is added from the embedding
  std::vector<std::string> notices;  // e.g. the dropped MTP head
};

// Assigns every tensor of `store` its role by name (llama-family and Qwen3.5-family layouts,
// Hugging Face or MLX prefixes). Throws naming the tensor when one inside the text model has a
// name whose relation to the residual stream is unknown, so nothing is silently left unrotated.
RotationPlan rotation_plan(const WeightStore& store);

// The rotated tensor as f32, in its (output) shape. Keep tensors need no call: copy them.
std::vector<float> rotated_tensor_f32(const RotatedTensor& t, const HiddenRotation& rotation,
                                      float norm_offset);

}  // namespace hearth::quant
