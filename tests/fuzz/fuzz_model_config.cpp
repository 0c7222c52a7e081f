// Fuzz target: config.json (and, after a NUL byte, generation_config.json) → ModelConfig → the
// architecture's descriptor (llama family or Qwen3.5 family, by model_type) → the rope
// frequencies of every rope spec, as load_model does before it touches any weight. Parsed as
// ModelConfig::load parses the file. Covers text_config wrapping, typed field access, the shape
// checks of config_checks.h, per-layer lists (layer_types, sliding windows), MoE shapes and
// every rope scaling type. The architecture is picked by model_type() as the registry picks it.
// A config that is accepted must give positive dimensions and a rotary part within head_dim.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "loader/config.h"
#include "models/llama.h"
#include "models/qwen3_5.h"

namespace {

using namespace hearth;

void check_rope(const RopeSpec& rope, int64_t head_dim, int64_t n_ctx) {
  if (rope.rotary_dim <= 0 || rope.rotary_dim > head_dim || rope.rotary_dim % 2 != 0)
    fuzz::invariant_failed("rotary_dim outside (0, head_dim] or odd",
                           std::to_string(rope.rotary_dim) + " / " + std::to_string(head_dim));
  float scale = 0;
  // Positions up to the trained context and past it (dynamic NTK recomputes there).
  for (int64_t len : {int64_t(1), std::max<int64_t>(n_ctx, 1), std::max<int64_t>(n_ctx, 1) * 4}) {
    const std::vector<float> f = rope.inv_freq(len, &scale);
    if (f.size() != size_t(rope.rotary_dim / 2))
      fuzz::invariant_failed("inv_freq has the wrong length");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [config_text, generation_text] =
      fuzz::split_at_nul(std::string_view(reinterpret_cast<const char*>(data), size));
  const auto config = nlohmann::json::parse(config_text, nullptr, false);
  const auto generation = generation_text.empty()
                              ? nlohmann::json::object()
                              : nlohmann::json::parse(generation_text, nullptr, false);
  // load() refuses these before from_json.
  if (config.is_discarded() || !generation.is_object()) return 0;
  try {
    const ModelConfig c = ModelConfig::from_json(config, generation);
    c.eos_token_ids();
    const auto& llama = llama_model_types();
    const auto& qwen = qwen3_5_model_types();
    if (std::find(llama.begin(), llama.end(), c.model_type()) != llama.end()) {
      const LlamaDescriptor d = llama_descriptor_from_config(c);
      if (d.n_embd <= 0 || d.n_layer <= 0 || d.n_head <= 0 || d.n_head_kv <= 0 || d.head_dim <= 0 ||
          d.n_ff <= 0 || d.n_vocab <= 0)
        fuzz::invariant_failed("llama descriptor accepted with a non-positive dimension");
      if (d.window.size() != size_t(d.n_layer) || d.rope_index.size() != size_t(d.n_layer) ||
          d.use_rope.size() != size_t(d.n_layer))
        fuzz::invariant_failed("llama descriptor: per-layer lists differ from n_layer");
      for (int i : d.rope_index)
        if (i < 0 || size_t(i) >= d.ropes.size())
          fuzz::invariant_failed("llama descriptor: rope_index out of range");
      for (const RopeSpec& r : d.ropes) check_rope(r, d.head_dim, d.n_ctx_train);
    } else if (std::find(qwen.begin(), qwen.end(), c.model_type()) != qwen.end()) {
      const Qwen35Descriptor d = qwen3_5_descriptor_from_config(c);
      if (d.n_embd <= 0 || d.n_layer <= 0 || d.n_head <= 0 || d.n_head_kv <= 0 || d.head_dim <= 0 ||
          d.n_vocab <= 0)
        fuzz::invariant_failed("qwen3_5 descriptor accepted with a non-positive dimension");
      if (d.linear_layer.size() != size_t(d.n_layer) || d.moe_layer.size() != size_t(d.n_layer))
        fuzz::invariant_failed("qwen3_5 descriptor: per-layer lists differ from n_layer");
      check_rope(d.rope, d.head_dim, d.n_ctx_train);
    }
  } catch (const Error&) {  // a load error naming the field; anything else is a finding
  }
  return 0;
}
