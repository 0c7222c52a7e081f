#include "models/rope.h"

#include <cmath>

#include "core/error.h"

namespace hearth {

namespace {

using nlohmann::json;

double num_or(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail("config.json: rope parameter '{}' must be a number", key);
  return it->get<double>();
}

// Base frequencies in float32, as torch computes base ** (arange(0, dim, 2) / dim).
std::vector<float> base_inv_freq(double theta, int dim) {
  std::vector<float> f(size_t(dim / 2));
  for (int i = 0; i < dim / 2; ++i) {
    float exponent = float(2 * i) / float(dim);
    f[size_t(i)] = 1.0f / float(std::pow(theta, double(exponent)));
  }
  return f;
}

}  // namespace

RopeSpec rope_spec_from_config(const ModelConfig& config, const std::string& layer_type,
                               int head_dim, double partial_rotary_factor) {
  RopeSpec spec;
  const json& raw = config.raw();
  json params = json::object();
  if (raw.contains("rope_parameters") && raw["rope_parameters"].is_object()) {
    params = raw["rope_parameters"];
    if (params.contains(layer_type) && params[layer_type].is_object()) params = params[layer_type];
  } else {
    if (raw.contains("rope_scaling") && raw["rope_scaling"].is_object()) params = raw["rope_scaling"];
    if (layer_type == "sliding_attention" && raw.contains("rope_local_base_freq")) {
      params = json::object();  // gemma3: local layers use plain rope with their own base
      params["rope_theta"] = raw["rope_local_base_freq"];
    }
  }
  spec.theta = num_or(params, "rope_theta", config.get_float_or("rope_theta", 10000.0));
  std::string type = "default";
  if (params.contains("rope_type") && params["rope_type"].is_string())
    type = params["rope_type"].get<std::string>();
  else if (params.contains("type") && params["type"].is_string())
    type = params["type"].get<std::string>();
  spec.type = type;
  partial_rotary_factor = num_or(params, "partial_rotary_factor", partial_rotary_factor);
  spec.rotary_dim = int(double(head_dim) * partial_rotary_factor);
  spec.rotary_dim -= spec.rotary_dim % 2;
  spec.max_position = config.get_int_or("max_position_embeddings", 2048);
  spec.factor = num_or(params, "factor", 1.0);
  spec.original_max_position =
      int64_t(num_or(params, "original_max_position_embeddings", double(spec.max_position)));
  spec.low_freq_factor = num_or(params, "low_freq_factor", 1.0);
  spec.high_freq_factor = num_or(params, "high_freq_factor", 4.0);
  spec.beta_fast = num_or(params, "beta_fast", 32.0);
  spec.beta_slow = num_or(params, "beta_slow", 1.0);
  spec.attention_factor = num_or(params, "attention_factor", 0.0);
  spec.mscale = num_or(params, "mscale", 0.0);
  spec.mscale_all_dim = num_or(params, "mscale_all_dim", 0.0);
  if (params.contains("truncate") && params["truncate"].is_boolean())
    spec.truncate = params["truncate"].get<bool>();
  if (type == "yarn" && params.contains("original_max_position_embeddings"))
    spec.factor = double(spec.max_position) / double(spec.original_max_position);
  static const char* known[] = {"default", "linear", "dynamic", "llama3", "yarn"};
  bool ok = false;
  for (const char* k : known) ok |= (type == k);
  if (!ok) fail("{}: rope type '{}' is not supported (supported: default, linear, dynamic, llama3, yarn)",
                config.source(), type);
  return spec;
}

std::vector<float> RopeSpec::inv_freq(int64_t max_seq_len, float* attention_scale) const {
  const int dim = rotary_dim;
  *attention_scale = 1.0f;
  if (type == "default") return base_inv_freq(theta, dim);
  if (type == "linear") {
    auto f = base_inv_freq(theta, dim);
    for (auto& v : f) v = float(v / float(factor));
    return f;
  }
  if (type == "dynamic") {
    const double seq = double(std::max(max_seq_len, max_position));
    const double base = theta * std::pow(factor * seq / double(max_position) - (factor - 1.0),
                                         double(dim) / double(dim - 2));
    return base_inv_freq(base, dim);
  }
  if (type == "llama3") {
    auto f = base_inv_freq(theta, dim);
    const float old_ctx = float(original_max_position);
    const float low_wavelen = old_ctx / float(low_freq_factor);
    const float high_wavelen = old_ctx / float(high_freq_factor);
    for (auto& v : f) {
      const float wavelen = 2.0f * float(M_PI) / v;
      float scaled = wavelen > low_wavelen ? v / float(factor) : v;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_ctx / wavelen - float(low_freq_factor)) /
                             float(high_freq_factor - low_freq_factor);
        scaled = (1.0f - smooth) * scaled / float(factor) + smooth * scaled;
      }
      v = scaled;
    }
    return f;
  }
  // yarn
  auto get_mscale = [](double scale, double m) {
    return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  };
  double att = attention_factor;
  if (att == 0.0) {
    att = (mscale != 0.0 && mscale_all_dim != 0.0)
              ? get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
              : get_mscale(factor, 1.0);
  }
  *attention_scale = float(att);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(double(original_max_position) / (rotations * 2 * M_PI))) /
           (2 * std::log(theta));
  };
  double low = correction_dim(beta_fast), high = correction_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;
  auto extrapolation = base_inv_freq(theta, dim);
  std::vector<float> f(extrapolation.size());
  for (size_t i = 0; i < f.size(); ++i) {
    const float pos_freq = 1.0f / extrapolation[i];
    const float interp = 1.0f / (float(factor) * pos_freq);
    float ramp = float((double(i) - low) / (high - low));
    ramp = std::min(1.0f, std::max(0.0f, ramp));
    const float extrap_factor = 1.0f - ramp;
    f[i] = interp * (1.0f - extrap_factor) + extrapolation[i] * extrap_factor;
  }
  return f;
}

}  // namespace hearth
