// Rotary-embedding frequencies from a config, as Hugging Face computes them: default, linear,
// dynamic (NTK, recomputed as the sequence grows), llama3 and yarn, with partial rotary.
// Reads either v5 `rope_parameters` (optionally per layer type) or v4 `rope_scaling` +
// `rope_theta` (+ gemma3's `rope_local_base_freq` for sliding layers).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "loader/config.h"

namespace hearth {

struct RopeSpec {
  std::string type = "default";
  double theta = 10000.0;
  int rotary_dim = 0;  // even; <= head_dim
  double factor = 1.0;
  int64_t max_position = 0;                              // config max_position_embeddings
  int64_t original_max_position = 0;                     // llama3 / yarn
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;                         // yarn; 0 = derived
  double mscale = 0.0, mscale_all_dim = 0.0;             // yarn (DeepSeek style)
  bool truncate = true;                                  // yarn

  // Frequencies for a sequence whose largest position so far is max_seq_len - 1 (only
  // "dynamic" depends on it); also returns the cos/sin scale.
  std::vector<float> inv_freq(int64_t max_seq_len, float* attention_scale) const;
};

// The rope settings for one layer type ("full_attention" or "sliding_attention"). The rotated
// share of a head is partial_rotary_factor from the rope parameters, else from the config, else
// `default_partial_rotary_factor` (the architecture's). Every value is checked (rotary_dim even,
// in [2, head_dim]; factors positive and finite, ...) with an error naming its field.
RopeSpec rope_spec_from_config(const ModelConfig& config, const std::string& layer_type,
                               int head_dim, double default_partial_rotary_factor);

}  // namespace hearth
