// `hearth quantize`: converts a float checkpoint (F32, F16 or BF16 safetensors) into a quantized
// one in MLX's layout (affine, which mlx-lm and hearth load, or trellis), optionally rotating its
// hidden dimension first (quant/rotation.h); format "none" writes the rotated float checkpoint. Two
// steps: the plan (which tensor becomes what, and config.json's "quantization" object), computed
// from names and shapes alone, then the run, which streams tensor by tensor into OUT.partial-<pid>
// next to OUT and renames that to OUT once config.json, written last, is on disk. OUT therefore
// either does not exist or is a complete checkpoint; an error or a cancel removes the partial
// directory.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"
#include "quant/quantize_experts.h"
#include "quant/quantize_format.h"
#include "quant/rotation.h"
#include "quant/trellis_coder.h"

namespace hearth::quant {

// One --module-bits item: the modules whose path ends with `suffix` (whole dot-separated parts:
// "mlp.down_proj" matches "model.layers.3.mlp.down_proj") get `bits`, or stay unquantized when
// bits is 0 ("false"). When several match, the longest suffix wins.
struct ModuleOverride {
  std::string suffix;
  int bits = 0;
};
// Parses "mlp.down_proj=8,self_attn.q_proj=false"; throws naming the bad item.
std::vector<ModuleOverride> parse_module_bits(std::string_view text);

struct QuantizeSpec {
  std::string format = "affine";  // a QuantFormat, or "none" (a float copy; needs rotation)
  QuantParams params;
  std::vector<ModuleOverride> overrides;
  // The token embedding and the output head: < 0 coded like every other module; 0 kept in
  // float; else affine with these bits and group 64 whatever the run's format (as llama.cpp's
  // K-quant mixes keep them at Q6_K / Q8_0).
  int embedding_bits = -1;
  std::optional<RotationSpec> rotation = std::nullopt;  // fold a sign-Hadamard rotation in first
  // MoE experts (per-expert, fused or MLX float tensors) are written stacked, in mlx-lm's
  // `mlp.switch_mlp.{gate,up,down}_proj` layout, when quantizing. false keeps the input's names
  // (a 3-D tensor is then copied in float): tests compare the two layouts.
  bool stack_experts = true;
};

// The group size of the embedding and head when --embedding-bits codes them in affine.
inline constexpr int kEmbeddingGroupSize = 64;

struct PlannedTensor {
  // What the output is made of, read one after the other: the input tensor as one matrix, or
  // for MoE experts stacked into mlx-lm's switch_mlp layout, each expert's (quantize_experts.h).
  std::vector<InputMatrix> parts;
  std::string module;                     // the weight's name without ".weight"; empty when copied
  const QuantFormat* format = nullptr;    // when quantized
  QuantParams params;                     // when quantized
  std::vector<SafetensorsEntry> outputs;  // when copied: the input tensor (or the stack) as it is
  bool quantized() const { return !module.empty(); }
};

struct QuantizePlan {
  const QuantFormat* format = nullptr;  // nullptr for "none"
  std::optional<RotationPlan> rotation;
  std::vector<PlannedTensor> tensors;  // every input tensor (a stack: once), in name order
  // config.json's "quantization" (written as "quantization_config" too, as mlx-lm does): the
  // default parameters, then each overridden module's parameters, or false for every
  // linear-shaped module left unquantized.
  nlohmann::ordered_json quantization;
  // One line per reason modules stay unquantized, e.g. "2 modules stay bf16: last dim 96 not a
  // multiple of 64 (model.layers.*.mlp.down_proj)".
  std::vector<std::string> notices;
  int64_t n_quantized = 0;  // modules
  int64_t quantized_params = 0;
  int64_t total_params = 0;
  size_t quantized_bytes = 0;  // the quantized modules' output (codes, scales and biases)
  size_t output_bytes = 0;     // every output tensor
};

// What becomes of each tensor of `store` (after the rotation, when the spec asks for one: an
// untied head is added, the MTP head dropped). A tensor is quantized iff it is a 2-D NAME.weight
// (a linear or embedding layer; not a norm, not in a vision or audio tower, which mlx-vlm keeps
// in float too) or a stack of MoE experts, the format can code its shape and dtype, and no
// override says false. Throws on an unknown format, unsupported parameters, or an override that
// matches no module.
QuantizePlan quantize_plan(const WeightStore& store, const QuantizeSpec& spec);

struct QuantizeProgress {
  int64_t modules_done = 0, modules_total = 0;
  int64_t weights_done = 0, weights_total = 0;  // of the quantized modules
  double seconds = 0;
};

struct QuantizeOptions {
  QuantizeSpec spec;
  int n_threads = 0;  // <= 0: the CPUs this process may use
  // Who codes trellis blocks: cpu, cuda, cuda:N or auto (a GPU when the build has CUDA and one
  // is present; quant/trellis_coder.h).
  std::string device = "auto";
  SafetensorsWriterOptions writer;  // shard size; its metadata is set to {"format": "mlx"}
  // Set from another thread or a signal handler to stop: the run removes the partial
  // directory and throws hearth::Error("interrupted").
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(const QuantizePlan&)> on_plan;          // before the first tensor
  std::function<void(const QuantizeProgress&)> on_progress;  // after each quantized module
  // A module's input Hessian ([in, in] f32; in = the weight's last dim) for the formats that use
  // one (trellis: block LDLQ), or nullptr. Unset: none. (runtime/calibration.h captures them.)
  std::function<const float*(const std::string& module, int64_t in_features)> hessian;
};

struct QuantizeResult {
  std::filesystem::path out;
  int64_t n_quantized = 0, quantized_params = 0, total_params = 0;
  size_t quantized_bytes = 0;
  size_t input_bytes = 0;          // the input's tensors
  size_t output_bytes = 0;         // the output's .safetensors files
  size_t output_tensor_bytes = 0;  // their tensors' bytes (without headers)
  size_t n_files = 0;              // .safetensors files written
  double seconds = 0;
  std::string coder_device;  // who coded the trellis blocks ("cpu", "cuda:0"); empty: none
};

// Quantizes checkpoint `in` into the new directory `out`. Throws hearth::Error when `out`
// exists, `in` is not a float checkpoint, or anything fails; nothing is left behind then.
// With spec.rotation, config.json gets "rotation": {"kind": "sign_hadamard", "block", "seed"}
// (and tie_word_embeddings false when the head was untied).
QuantizeResult quantize_checkpoint(const std::filesystem::path& in,
                                   const std::filesystem::path& out,
                                   const QuantizeOptions& options);

}  // namespace hearth::quant
