// Limits and checks every architecture applies to config.json, so an impossible value is a load
// error that names the field, the value and the bound, never a crash or a bad_alloc later.
// Sizes are derived from config.json before any tensor is matched against it (per-layer tables,
// row ranges of fused weights, the KV cache at full context), so the tensor audit alone comes
// too late. The upper bounds sit far above every published model; besides catching typos, they
// keep every product the loader forms (at most three sizes times an element size) inside int64
// and every size passed to a kernel as an int inside int32.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "loader/config.h"

namespace hearth {

namespace config_limits {
// Per-layer tables are sized from num_hidden_layers before the weights are read; the deepest
// published decoders have under 200 layers.
inline constexpr int64_t kLayers = 1024;
// hidden_size and intermediate sizes; the largest published are under 75k.
inline constexpr int64_t kWidth = int64_t(1) << 20;
// Attention and linear-attention head counts; the largest published have 128.
inline constexpr int64_t kHeads = 4096;
// Per-head dimensions; the largest published are 256 (512 with latent attention).
inline constexpr int64_t kHeadDim = 4096;
// Routed experts; the largest published have 512.
inline constexpr int64_t kExperts = int64_t(1) << 16;
// Gated DeltaNet conv taps (4 in every checkpoint).
inline constexpr int64_t kConvKernel = 1024;
// Token ids and positions are int32 in every kernel and in the sampler.
inline constexpr int64_t kVocab = INT32_MAX;
inline constexpr int64_t kPositions = INT32_MAX;
// Scalars the forward casts to float (eps, scales, softcaps, rope factors) stay finite there.
inline constexpr double kFloatMax = double(std::numeric_limits<float>::max());
}  // namespace config_limits

// The sizes every decoder reads the same way, each checked alone and against the others.
struct AttentionDims {
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0;
  int64_t n_ctx_train = 0;  // max_position_embeddings
};

// hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads (default: the head
// count; must divide it), head_dim (default hidden_size / num_attention_heads, which must then
// divide evenly), vocab_size and max_position_embeddings (default 2048).
AttentionDims read_attention_dims(const ModelConfig& c);

// The per-layer list `key` (layer_types, no_rope_layers, ...): nullptr when absent or null, else
// the array, which must have exactly n_layer entries. Entries are the caller's to check.
const nlohmann::json* layer_list(const ModelConfig& c, const std::string& key, int64_t n_layer);

// The product of the (field, value) factors times `unit` (e.g. bytes per element, named by
// `unit_name`), or an error naming every factor when it does not fit in int64. `what` says what
// the product sizes ("the KV cache at max_position_embeddings").
int64_t checked_product(const ModelConfig& c, std::string_view what,
                        std::initializer_list<std::pair<std::string_view, int64_t>> factors,
                        int64_t unit = 1, std::string_view unit_name = {});

// The KV cache of n_attn_layers attention layers at max_position_embeddings, keys and values in
// f32 (the widest activation dtype), must be addressable: an error naming the fields otherwise.
// A context the user asks for beyond it is clamped by the engine instead.
int64_t check_kv_cache_size(const ModelConfig& c, const AttentionDims& d, int64_t n_attn_layers);

}  // namespace hearth
