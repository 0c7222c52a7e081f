// The weight formats `hearth quantize` can write, one QuantFormat each: which weights a format
// can code, the tensors a coded module becomes, the per-tensor quantize step and the module's
// entry in config.json. The checkpoint converter (quantize_checkpoint) only goes through this
// table: "affine" (MLX) and "trellis" (hearth's QTIP-style trellis, docs/QUANTIZATION.md).
#pragma once
#include <atomic>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"

namespace hearth::quant {

class TrellisBlockCoder;

struct QuantParams {
  int bits = 4;
  int group_size = 64;
  int axis = 1;  // trellis: 1 codes the rows of W [out, in]; 0 stores and codes Wᵀ
  // trellis: the module's input Hessian [in, in] from calibration, for block LDLQ (quant/ldlq.h);
  // nullptr: plain Viterbi. Set per module for the quantize call, not part of the plan.
  const float* hessian = nullptr;
  // trellis: who codes the blocks (trellis_coder.h); nullptr: the CPU, on the run's pool. Set
  // per run, not part of the plan.
  TrellisBlockCoder* coder = nullptr;
};

struct QuantFormat {
  std::string_view name;
  // Throws hearth::Error naming the option ("--bits", "--group-size") on unsupported values.
  void (*check)(const QuantParams& params);
  // The parameters module `module` gets from the run's (trellis picks the coded axis by the
  // module's role); nullptr: the run's as they are.
  QuantParams (*module_params)(const std::string& module, QuantParams params);
  // Empty if a [rows, cols] weight of `dtype` can be coded, else why not, in a few words that
  // are the same for every module sharing the reason ("last dim 100 not a multiple of 64").
  std::string (*unfit)(int64_t rows, int64_t cols, DType dtype, const QuantParams& params);
  // The tensors module `module` (a weight's name without ".weight") becomes.
  std::vector<SafetensorsEntry> (*outputs)(const std::string& module, const TensorInfo& weight,
                                           const QuantParams& params);
  // Codes `weight` into out[i], each sized as outputs()[i]. Uses the pool's threads; returns
  // early (contents unspecified) once *cancel is set.
  void (*quantize)(const TensorInfo& weight, const QuantParams& params, ThreadPool& pool,
                   const std::atomic<bool>* cancel, std::vector<std::vector<uint8_t>>& out);
  // The module's parameters as config.json's "quantization" object states them.
  nlohmann::ordered_json (*config_entry)(const QuantParams& params);
};

// Trellis axis policy: 0 (stored transposed, coded along the output dim, a scatter matvec) for
// the MLP down projections (dense, routed experts per expert or stacked in switch_mlp, shared
// experts), 1 for every other module.
int trellis_axis_for(const std::string& module);

// nullptr when `name` is not a format the quantizer writes.
const QuantFormat* quant_format_find(std::string_view name);
// The names quant_format_find knows, comma-separated, for messages.
std::string quant_format_names();

}  // namespace hearth::quant
