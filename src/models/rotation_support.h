// What an offline rotation of the hidden dimension (quant/rotation.h) needs to know about a
// model's wiring, which only the model families know: whether every residual-stream norm sits in
// front of the linears that read it (pre-norm), and what those norms add to their stored gains.
#pragma once
#include <filesystem>

namespace hearth {

// The offset the checkpoint's residual-stream RMSNorms add to their stored gains (1 for
// (1 + w) norms: gemma, and the Qwen3.5 family in Hugging Face layout; 0 otherwise). Throws
// hearth::Error naming the model_type when the hidden dimension cannot be rotated offline:
// norms on sublayer outputs (gemma2, gemma3, olmo2) apply their gains after the residual write,
// where no linear can absorb them.
float rotation_norm_offset(const std::filesystem::path& checkpoint);

}  // namespace hearth
