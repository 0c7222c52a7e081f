#include "models/model_common.h"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace hearth {

namespace {
void prepare_stacked_weights(Backend& backend, std::span<Tensor* const> weights) {
  std::vector<Tensor> host, prepared(weights.size());
  for (const Tensor* t : weights) host.push_back(*t);
  backend.prepare_weights_stacked(host.data(), int(host.size()), prepared.data());
  for (size_t i = 0; i < weights.size(); ++i) *weights[i] = prepared[i];
}
}  // namespace

void prepare_stacked(Backend& backend, std::initializer_list<Tensor*> weights) {
  prepare_stacked_weights(backend, {weights.begin(), weights.size()});
}

void prepare_stacked(Backend& backend, std::initializer_list<Linear*> parts) {
  std::vector<Tensor*> weights;
  for (Linear* l : parts) weights.push_back(&l->w);
  prepare_stacked_weights(backend, weights);
  for (Linear* l : parts)
    if (!l->bias.empty()) l->bias = backend.prepare_weight(l->bias);
}

void use_text_model_names(WeightStore& weights) {
  // A bare base model (saved from AutoModel, as embedding models are: Qwen3-Embedding's
  // embed_tokens.weight, layers.N.*, norm.weight) has the decoder's names without "model.".
  if (weights.contains("embed_tokens.weight") && !weights.contains("model.embed_tokens.weight")) {
    for (const auto& name : weights.names())
      if (name.rfind("embed_tokens.", 0) == 0 || name.rfind("layers.", 0) == 0 ||
          name.rfind("norm.", 0) == 0)
        weights.rename(name, "model." + name);
  }
  for (const auto& name : weights.names()) {
    for (auto [from, to] : {std::pair<std::string, std::string>{"model.language_model.", "model."},
                            {"language_model.model.", "model."},
                            {"language_model.lm_head.", "lm_head."}}) {
      if (name.rfind(from, 0) == 0) weights.rename(name, to + name.substr(from.size()));
    }
  }
}

ModelInfo decoder_info(const ModelConfig& config, const WeightStore& weights,
                       const AttentionDims& dims, int64_t kv_layers, DType act) {
  ModelInfo info;
  info.n_vocab = dims.n_vocab;
  info.n_embd = dims.n_embd;
  info.n_layer = dims.n_layer;
  info.n_ctx_train = dims.n_ctx_train;
  info.kv_bytes_per_token =
      kv_layers * 2 * dims.n_head_kv * dims.head_dim * int64_t(dtype_size(act));
  info.n_params = weights.total_params();
  info.weight_bytes = weights.total_bytes();
  for (auto [dtype, bytes] : weights.bytes_by_dtype())
    info.dtypes += (info.dtypes.empty() ? "" : ", ") + std::string(dtype_name(dtype)) + ": " +
                   std::to_string(bytes) + " bytes";
  for (const auto& [format, t] : weights.taken_by_format())
    info.formats += fmt::format("{}{}: {:.2f} M weights, {:.2f} MB, {:.2f} bits/weight",
                                info.formats.empty() ? "" : "; ", format, double(t.params) / 1e6,
                                double(t.bytes) / 1e6,
                                t.params ? 8.0 * double(t.bytes) / double(t.params) : 0.0);
  info.eos_token_ids = config.eos_token_ids();
  return info;
}

void set_decode_work(ModelInfo& info, const WeightStore& weights, const Tensor& embed,
                     const Tensor& lm_head, std::span<const UnreadWeight> unread) {
  size_t bytes = weights.taken_bytes();
  int64_t params = weights.taken_params();
  auto drop = [&](const Tensor& t, int64_t times) {
    bytes -= size_t(times) * t.stored_bytes();
    params -= times * t.numel();
  };
  if (lm_head.data != embed.data) drop(embed, 1);
  for (const UnreadWeight& u : unread) drop(u.weight, u.times);
  info.decode_bytes = bytes;
  info.active_params = params;
  info.head_params = lm_head.numel();
}

Backend::DecodeLayers decode_step(const std::vector<Backend::DecodeLayer>& layers,
                                  const AttentionDims& dims, const Tensor& x, int32_t position) {
  Backend::DecodeLayers step;
  step.layers = layers.data();
  step.n_layers = int(layers.size());
  step.x = x;
  step.position = position;
  step.n_head = int(dims.n_head);
  step.n_head_kv = int(dims.n_head_kv);
  step.head_dim = int(dims.head_dim);
  return step;
}

}  // namespace hearth
