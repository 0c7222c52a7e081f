// The quantization of a checkpoint, from config.json's "quantization" object (MLX; also accepted
// as "quantization_config"): a default {group_size, bits, mode} and per-module overrides keyed by
// module path, each an object of the same form or `false` (that module stays unquantized), as
// mlx-lm writes them. Modes: "affine" (MLX) and "trellis" (hearth's trellis-coded format:
// {mode, bits 2-4, group_size 256, trellis: {L: 12, code: "1mad", axis: 0|1}}).
// Which modules are packed is decided by the checkpoint (a module is packed iff it has a
// `.scales` tensor); this says how to read them.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/tensor.h"

namespace hearth {

struct ModuleQuantization {
  WeightFormat format = WeightFormat::Affine;
  int bits = 4;
  int group_size = 64;
  int axis = 1;  // trellis only
};

class QuantizationConfig {
 public:
  // Empty when config.json has neither key. Throws hearth::Error naming `source` and the field
  // for an unknown mode, bits or group size, a trellis code or L hearth does not implement, or
  // a quantization_config of another tool (GPTQ, AWQ, bitsandbytes: "quant_method").
  static QuantizationConfig from_json(const nlohmann::json& config, const std::string& source);

  bool empty() const { return !default_ && overrides_.empty(); }
  // How module `path` (e.g. "model.layers.0.mlp.down_proj") is quantized; nullopt when it is
  // not (an override of false, or no default).
  std::optional<ModuleQuantization> for_module(const std::string& path) const;
  // Follows a checkpoint-name normalisation (WeightStore::rename of PATH.weight).
  void rename_module(const std::string& from, const std::string& to);

 private:
  std::optional<ModuleQuantization> default_;
  std::map<std::string, std::optional<ModuleQuantization>> overrides_;
};

}  // namespace hearth
