// Shape checks every architecture applies to config.json, so impossible values are load errors
// that name the field, never a crash later.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "loader/config.h"

namespace hearth {

// Each (field, value) must be > 0.
inline void require_positive(const ModelConfig& c,
                             std::initializer_list<std::pair<const char*, int64_t>> fields) {
  for (const auto& [name, value] : fields)
    if (value <= 0) fail("{}: {} must be positive, got {}", c.source(), name, value);
}

// Query heads must split evenly over key/value heads (GQA).
inline void require_head_grouping(const ModelConfig& c, int64_t n_head, int64_t n_head_kv) {
  if (n_head % n_head_kv != 0)
    fail("{}: num_attention_heads ({}) is not a multiple of num_key_value_heads ({})", c.source(),
         n_head, n_head_kv);
}

}  // namespace hearth
