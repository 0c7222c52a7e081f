// Text embeddings from a decoder: the last hidden states of the input (Model::forward with
// LogitsRows::Hidden, no vocabulary projection), pooled over its tokens and L2-normalised as the
// checkpoint's sentence-transformers configuration says — modules.json naming a Pooling module
// (its config.json: pooling_mode_lasttoken for Qwen3-Embedding, mean, cls, max,
// mean_sqrt_len) and a Normalize module. A checkpoint without that configuration is pooled by
// the mean of its tokens and normalised (docs/design-notes.md, "Embeddings").
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace hearth {

class Model;

enum class Pooling { Mean, LastToken, First, Max, MeanSqrtLen };

struct EmbeddingConfig {
  Pooling pooling = Pooling::Mean;
  bool normalize = true;
  bool from_sentence_transformers = false;  // read from modules.json, not the default

  // Reads DIR/modules.json and its Pooling module's config.json when present; throws
  // hearth::Error naming the file for a configuration hearth cannot follow (weighted mean,
  // several modes at once, include_prompt false, a Dense projection after pooling).
  static EmbeddingConfig load(const std::filesystem::path& dir);
};

const char* pooling_name(Pooling pooling);

// Pools hidden states [n_tokens, n_embd] (row-major f32) into one vector, normalised when the
// config says so.
std::vector<float> pool_hidden_states(std::span<const float> hidden, int64_t n_tokens,
                                      int64_t n_embd, const EmbeddingConfig& config);

// The embedding of `tokens` (non-empty, ids checked by the model): the hidden states of a
// fresh sequence, run in chunks of at most `chunk` tokens, pooled. Runs forwards on `model`:
// call it where nothing else does (Engine::with_model).
std::vector<float> embed_tokens(Model& model, std::span<const int32_t> tokens,
                                const EmbeddingConfig& config, int64_t chunk);

// The first `dimensions` values (Matryoshka-trained models keep their meaning there; the
// OpenAI API's `dimensions`), normalised again when `normalize`.
void truncate_embedding(std::vector<float>& embedding, int64_t dimensions, bool normalize);

}  // namespace hearth
