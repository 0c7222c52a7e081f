// What the architectures share outside their forward passes: a linear weight with its bias, the
// plain decoder names of a multimodal checkpoint's text model, the ModelInfo fields every decoder
// fills the same way, and the part of a one-token decode step (Backend::decode_layers) that every
// stack describes alike.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/config_checks.h"
#include "models/model.h"

namespace hearth {

struct Linear {
  Tensor w;     // [out, in]
  Tensor bias;  // [out] or empty
};

// Host weights of products that always take the same input (q, k, v; gate, up), prepared
// together (Backend::prepare_weights_stacked) in this order; each bias alone.
void prepare_stacked(Backend& backend, std::initializer_list<Linear*> parts);
void prepare_stacked(Backend& backend, std::initializer_list<Tensor*> weights);

// Multimodal wrappers keep the text model under a prefix: model.language_model.* (HF) and
// language_model.model.* (gemma3's legacy names, MLX) become model.*, language_model.lm_head.*
// becomes lm_head.*; a bare base model's embed_tokens.*, layers.*, norm.* (embedding models
// saved from AutoModel) become model.*.
void use_text_model_names(WeightStore& weights);

// ModelInfo with what every decoder fills the same way: sizes, weight totals and dtypes, eos
// ids, and the KV bytes per token of `kv_layers` attention layers storing keys and values in
// `act`. The caller adds model_type, architecture and the decode work (set_decode_work).
ModelInfo decoder_info(const ModelConfig& config, const WeightStore& weights,
                       const AttentionDims& dims, int64_t kv_layers, DType act);

// A weight that was taken but that a decode step does not read, `times` over.
struct UnreadWeight {
  Tensor weight;
  int64_t times = 1;
};

// ModelInfo's decode work (decode_bytes, active_params, head_params): every weight taken, less
// the embedding table when the head has its own matrix (a lookup reads one row) and less
// `unread`.
void set_decode_work(ModelInfo& info, const WeightStore& weights, const Tensor& embed,
                     const Tensor& lm_head, std::span<const UnreadWeight> unread = {});

// A one-token decode step over `layers` at `position`, x its [1, hidden] residual stream, with
// the attention sizes from `dims`; the caller adds the norms' eps and offset, the attention
// scale, the rope, the activation and, for Gated DeltaNet layers, their shapes.
Backend::DecodeLayers decode_step(const std::vector<Backend::DecodeLayer>& layers,
                                  const AttentionDims& dims, const Tensor& x, int32_t position);

}  // namespace hearth
