#include "runtime/embedding.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_bounded.h"
#include "models/model.h"

namespace hearth {

namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  if (parse_json_bounded(text.str(), j) != JsonParseStatus::Ok)
    fail("{} is not valid JSON", path.string());
  return j;
}

bool flag(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

void normalize(std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += double(x) * double(x);
  // sentence-transformers' Normalize (torch.nn.functional.normalize) divides by max(norm, 1e-12).
  const double norm = std::max(std::sqrt(sum), 1e-12);
  for (float& x : v) x = float(double(x) / norm);
}

}  // namespace

const char* pooling_name(Pooling pooling) {
  switch (pooling) {
    case Pooling::Mean:
      return "mean";
    case Pooling::LastToken:
      return "last token";
    case Pooling::First:
      return "first token (cls)";
    case Pooling::Max:
      return "max";
    case Pooling::MeanSqrtLen:
      return "mean, sqrt(length)";
  }
  return "?";
}

EmbeddingConfig EmbeddingConfig::load(const std::filesystem::path& dir) {
  EmbeddingConfig config;
  const auto modules_path = dir / "modules.json";
  if (!std::filesystem::exists(modules_path)) return config;
  const nlohmann::json modules = read_json(modules_path);
  if (!modules.is_array()) fail("{}: expected a list of modules", modules_path.string());
  config.from_sentence_transformers = true;
  config.normalize = false;
  bool pooled = false;
  for (const auto& m : modules) {
    const std::string type = m.is_object() ? m.value("type", "") : "";
    const std::string path = m.is_object() ? m.value("path", "") : "";
    if (type.ends_with(".Normalize")) {
      config.normalize = true;
    } else if (type.ends_with(".Pooling")) {
      if (path.find("..") != std::string::npos || path.starts_with("/"))
        fail("{}: the Pooling module's path '{}' leaves the model directory", modules_path.string(),
             path);
      const auto pooling_path = dir / path / "config.json";
      const nlohmann::json p = read_json(pooling_path);
      std::vector<Pooling> modes;
      if (flag(p, "pooling_mode_cls_token")) modes.push_back(Pooling::First);
      if (flag(p, "pooling_mode_mean_tokens")) modes.push_back(Pooling::Mean);
      if (flag(p, "pooling_mode_max_tokens")) modes.push_back(Pooling::Max);
      if (flag(p, "pooling_mode_mean_sqrt_len_tokens")) modes.push_back(Pooling::MeanSqrtLen);
      if (flag(p, "pooling_mode_lasttoken")) modes.push_back(Pooling::LastToken);
      if (flag(p, "pooling_mode_weightedmean_tokens"))
        fail("{}: weighted-mean pooling is not supported", pooling_path.string());
      if (modes.size() != 1)
        fail("{}: exactly one pooling mode must be set, found {}", pooling_path.string(),
             modes.size());
      if (p.contains("include_prompt") && !flag(p, "include_prompt"))
        fail("{}: include_prompt false (instruction-excluding pooling) is not supported",
             pooling_path.string());
      config.pooling = modes[0];
      pooled = true;
    } else if (type.ends_with(".Dense")) {
      fail("{}: a Dense projection after pooling is not supported", modules_path.string());
    }
  }
  if (!pooled) config.pooling = Pooling::Mean;
  return config;
}

std::vector<float> pool_hidden_states(std::span<const float> hidden, int64_t n_tokens,
                                      int64_t n_embd, const EmbeddingConfig& config) {
  if (n_tokens < 1 || int64_t(hidden.size()) != n_tokens * n_embd)
    fail("pool_hidden_states: {} values for {} tokens of {}", hidden.size(), n_tokens, n_embd);
  std::vector<float> out(size_t(n_embd), 0.0f);
  auto row = [&](int64_t t) { return hidden.subspan(size_t(t * n_embd), size_t(n_embd)); };
  switch (config.pooling) {
    case Pooling::LastToken: {
      const auto r = row(n_tokens - 1);
      std::copy(r.begin(), r.end(), out.begin());
      break;
    }
    case Pooling::First: {
      const auto r = row(0);
      std::copy(r.begin(), r.end(), out.begin());
      break;
    }
    case Pooling::Max: {
      std::fill(out.begin(), out.end(), -std::numeric_limits<float>::infinity());
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto r = row(t);
        for (int64_t i = 0; i < n_embd; ++i)
          out[size_t(i)] = std::max(out[size_t(i)], r[size_t(i)]);
      }
      break;
    }
    case Pooling::Mean:
    case Pooling::MeanSqrtLen: {
      std::vector<double> sum(size_t(n_embd), 0.0);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const auto r = row(t);
        for (int64_t i = 0; i < n_embd; ++i) sum[size_t(i)] += r[size_t(i)];
      }
      const double d = config.pooling == Pooling::Mean ? double(n_tokens) : std::sqrt(n_tokens);
      for (int64_t i = 0; i < n_embd; ++i) out[size_t(i)] = float(sum[size_t(i)] / d);
      break;
    }
  }
  if (config.normalize) normalize(out);
  return out;
}

std::vector<float> embed_tokens(Model& model, std::span<const int32_t> tokens,
                                const EmbeddingConfig& config, int64_t chunk) {
  if (tokens.empty()) fail("the input is empty: at least one token is needed");
  const int64_t n = int64_t(tokens.size()), H = model.info().n_embd;
  chunk = std::max<int64_t>(chunk, 1);
  std::vector<float> hidden(size_t(n * H));
  auto state = model.new_sequence();
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t m = std::min(chunk, n - at);
    model.forward(*state, tokens.subspan(size_t(at), size_t(m)), LogitsRows::Hidden,
                  hidden.data() + at * H);
  }
  return pool_hidden_states(hidden, n, H, config);
}

void truncate_embedding(std::vector<float>& embedding, int64_t dimensions, bool normalize_again) {
  if (dimensions < 1 || dimensions > int64_t(embedding.size()))
    fail("dimensions must be in [1, {}] for this model, got {}", embedding.size(), dimensions);
  embedding.resize(size_t(dimensions));
  if (normalize_again) normalize(embedding);
}

}  // namespace hearth
