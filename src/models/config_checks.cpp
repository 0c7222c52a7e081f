// The checks config_checks.h declares: the attention sizes every decoder shares, per-layer lists,
// and products of sizes that must fit in int64.
#include "models/config_checks.h"

#include <fmt/format.h>

#include "core/error.h"

namespace hearth {

using nlohmann::json;

AttentionDims read_attention_dims(const ModelConfig& c) {
  using namespace config_limits;
  AttentionDims d;
  d.n_embd = c.get_int_in("hidden_size", 1, kWidth);
  d.n_layer = c.get_int_in("num_hidden_layers", 1, kLayers,
                           "per-layer tables are sized from it before any weight is checked; "
                           "published models have fewer than 200 layers");
  d.n_head = c.get_int_in("num_attention_heads", 1, kHeads);
  d.n_head_kv = c.get_int_in_or("num_key_value_heads", d.n_head, 1, kHeads);
  // Query heads must split evenly over key/value heads (GQA).
  if (d.n_head % d.n_head_kv != 0)
    fail("{}: {} ({}) is not a multiple of {} ({})", c.source(),
         c.field_name("num_attention_heads"), d.n_head, c.field_name("num_key_value_heads"),
         d.n_head_kv);
  if (c.has("head_dim")) {
    d.head_dim = c.get_int_in("head_dim", 1, kHeadDim);
  } else {
    if (d.n_embd % d.n_head != 0)
      fail(
          "{}: head_dim is not set, so it is {} / {}, but {} is not a multiple of {}; set head_dim",
          c.source(), c.field_name("hidden_size"), c.field_name("num_attention_heads"), d.n_embd,
          d.n_head);
    d.head_dim = d.n_embd / d.n_head;
    if (d.head_dim > kHeadDim)
      fail("{}: head_dim is not set, and {} / {} = {} is above the largest head_dim ({})",
           c.source(), c.field_name("hidden_size"), c.field_name("num_attention_heads"), d.head_dim,
           kHeadDim);
  }
  d.n_vocab = c.get_int_in("vocab_size", 1, kVocab, "token ids are int32");
  d.n_ctx_train =
      c.get_int_in_or("max_position_embeddings", 2048, 1, kPositions, "positions are int32");
  return d;
}

const json* layer_list(const ModelConfig& c, const std::string& key, int64_t n_layer) {
  auto it = c.raw().find(key);
  if (it == c.raw().end() || it->is_null()) return nullptr;
  if (!it->is_array())
    c.fail_field(c.field_name(key), *it,
                 fmt::format("a list with one entry per layer ({})", n_layer));
  if (int64_t(it->size()) != n_layer)
    fail("{}: {} has {} entries, {} is {}", c.source(), c.field_name(key), it->size(),
         c.field_name("num_hidden_layers"), n_layer);
  return &*it;
}

int64_t checked_product(const ModelConfig& c, std::string_view what,
                        std::initializer_list<std::pair<std::string_view, int64_t>> factors,
                        int64_t unit, std::string_view unit_name) {
  int64_t product = unit;
  bool overflow = false;
  for (const auto& [name, value] : factors)
    overflow |= value < 0 || __builtin_mul_overflow(product, value, &product);
  if (!overflow) return product;
  std::string terms;
  for (const auto& [name, value] : factors)
    terms += fmt::format("{}{} ({})", terms.empty() ? "" : " × ", name, value);
  if (unit != 1) terms += fmt::format(" × {} {}", unit, unit_name);
  fail("{}: {} does not fit in 64 bits: {}", c.source(), what, terms);
}

int64_t check_kv_cache_size(const ModelConfig& c, const AttentionDims& d, int64_t n_attn_layers) {
  const std::string ctx = c.field_name("max_position_embeddings");
  const std::string heads = c.field_name("num_key_value_heads");
  const std::string head_dim = c.field_name("head_dim");
  return checked_product(c, "the KV cache at max_position_embeddings",
                         {{"attention layers", n_attn_layers},
                          {ctx, d.n_ctx_train},
                          {"keys and values", 2},
                          {heads, d.n_head_kv},
                          {head_dim, d.head_dim}},
                         int64_t(sizeof(float)), "bytes per f32 value");
}

}  // namespace hearth
