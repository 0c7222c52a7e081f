// MoE experts in mlx-lm's stacked layout, for `hearth quantize`. mlx-lm's models (and so every
// mlx-community MoE checkpoint) hold a layer's routed experts as one [E, out, in] tensor per
// projection, `PREFIX.mlp.switch_mlp.{gate,up,down}_proj`, where a Hugging Face checkpoint has one
// 2-D tensor per expert (`mlp.experts.N.gate_proj.weight`) or transformers 5's fused
// `mlp.experts.gate_up_proj` [E, 2I, H] (gate rows first) and `mlp.experts.down_proj` [E, H, I].
// This finds the experts by name and says which rows of which input tensor make each expert's
// matrix; the quantizer codes them expert by expert and writes them one after the other, which
// is the stacked tensor in every format (each expert's codes, scales and biases are contiguous).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loader/weight_store.h"
#include "quant/rotation.h"

namespace hearth::quant {

// A tensor as the quantizer reads it: the store's, or the rotated checkpoint's.
struct PlanSource {
  std::string name;
  const TensorInfo* info = nullptr;
  const RotatedTensor* rotated = nullptr;  // nullptr: info's bytes as they are
};

// A matrix read from the input: rows [row_begin, row_begin + rows) of tensor `source` seen as
// [.., cols] (a whole 2-D weight, one expert of a stacked tensor, or the gate or up half of one
// expert of a fused gate_up_proj).
struct InputMatrix {
  PlanSource source;
  int64_t row_begin = 0, rows = 0, cols = 0;
  // The input module this matrix is the whole of ("model.layers.0.mlp.experts.3.down_proj"), by
  // which calibration names its Hessian; empty for a slice of a fused tensor (which has none).
  std::string module;
};

// A whole tensor as one matrix ([.., cols] with cols its last dim; a 0-D tensor is 1 × 1).
InputMatrix input_matrix_whole(const PlanSource& source);

struct StackedExperts {
  std::string module;                // "model.layers.0.mlp.switch_mlp.gate_proj"
  std::vector<InputMatrix> experts;  // expert e's [out, in] matrix, e = 0..E-1
  std::vector<std::string> inputs;   // the input tensors it is made of
};

struct StackedExpertsPlan {
  std::vector<StackedExperts> stacks;  // in order of their first input's name
  // Per-expert weights that keep their names, one line per projection and reason, e.g.
  // "model.layers.0.mlp.experts.*.up_proj stays per expert, not stacked: expert 3 is missing".
  std::vector<std::string> notices;
};

// The stacks `sources` (in name order) make: per-expert `mlp.experts.N.{gate,up,down}_proj.weight`
// when experts 0..E-1 are all there, 2-D, of one shape and dtype (else they keep their names, with
// a notice); fused `mlp.experts.gate_up_proj` (split into gate and up) and
// `mlp.experts.down_proj`, with or without `.weight`; and float `mlp.switch_mlp.*_proj.weight`
// (an MLX float checkpoint), each 3-D (a fused or MLX tensor of another shape keeps its name, with
// a notice). Throws naming the tensors when two layouts would make the same stack.
StackedExpertsPlan stacked_experts_plan(const std::vector<PlanSource>& sources);

}  // namespace hearth::quant
