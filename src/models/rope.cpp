// Rope settings from config.json, each checked where it is read: every number the frequencies or
// the kernels depend on (rotary_dim above all, which indexes into every head) is validated with
// an error naming the field it came from.
#include "models/rope.h"

#include <cmath>

#include "core/error.h"
#include "models/config_checks.h"

namespace hearth {

namespace {

using config_limits::kFloatMax;
using nlohmann::json;

// A number read for the rope, with where it came from for messages (`value` is null for a
// default, which needs no checking).
struct Number {
  double x = 0.0;
  std::string field;
  const json* value = nullptr;
};

// One rope parameter object (v5 rope_parameters, maybe per layer type; v4 rope_scaling); `path`
// names it in messages.
class RopeParams {
 public:
  RopeParams(const ModelConfig& c, const json* object, std::string path)
      : c_(&c), object_(object), path_(std::move(path)) {}

  const json* find(const char* key) const {
    if (!object_) return nullptr;
    auto it = object_->find(key);
    return it == object_->end() || it->is_null() ? nullptr : &*it;
  }
  std::string field(const char* key) const { return path_ + "." + key; }

  // `key` here, else the text config's `config_key` (when given), else `fallback`.
  Number number(const char* key, double fallback, const char* config_key = nullptr) const {
    if (const json* v = find(key)) {
      if (!v->is_number()) c_->fail_field(field(key), *v, "a number");
      return {v->get<double>(), field(key), v};
    }
    if (config_key) return config_number(config_key, fallback);
    return {fallback, key, nullptr};
  }
  Number config_number(const char* key, double fallback) const {
    if (!c_->has(key)) return {fallback, key, nullptr};
    return {c_->get_float(key), c_->field_name(key), &*c_->raw().find(key)};
  }

  // A finite number in [lo, hi] ((lo, hi] when lo_open).
  double bounded(const Number& n, double lo, double hi, bool lo_open = false) const {
    const bool above = lo_open ? n.x > lo : n.x >= lo;
    if (n.value && (!std::isfinite(n.x) || !above || n.x > hi))
      c_->fail_field(n.field, *n.value,
                     fmt::format("a finite number in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
    return n.x;
  }

  std::string string(const char* key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) c_->fail_field(field(key), *v, "a string");
    return v->get<std::string>();
  }

  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) c_->fail_field(field(key), *v, "true or false");
    return v->get<bool>();
  }

 private:
  const ModelConfig* c_;
  const json* object_;
  std::string path_;
};

// The object field `key` of the text config, or nullptr when absent or null.
const json* object_field(const ModelConfig& c, const std::string& key) {
  auto it = c.raw().find(key);
  if (it == c.raw().end() || it->is_null()) return nullptr;
  if (!it->is_object()) c.fail_field(c.field_name(key), *it, "an object");
  return &*it;
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
                               int head_dim, double default_partial_rotary_factor) {
  RopeSpec spec;
  RopeParams params(config, nullptr, "");
  bool local_base = false;  // gemma3: local layers use plain rope with their own base
  if (const json* v5 = object_field(config, "rope_parameters")) {
    const std::string path = config.field_name("rope_parameters");
    params = RopeParams(config, v5, path);
    if (const json* per_type = params.find(layer_type.c_str())) {
      if (!per_type->is_object())
        config.fail_field(path + "." + layer_type, *per_type, "an object");
      params = RopeParams(config, per_type, path + "." + layer_type);
    }
  } else {
    if (const json* v4 = object_field(config, "rope_scaling"))
      params = RopeParams(config, v4, config.field_name("rope_scaling"));
    if (layer_type == "sliding_attention" && config.has("rope_local_base_freq")) {
      params = RopeParams(config, nullptr, "");
      local_base = true;
    }
  }
  const Number theta = local_base ? params.config_number("rope_local_base_freq", 10000.0)
                                  : params.number("rope_theta", 10000.0, "rope_theta");
  spec.theta = params.bounded(theta, 0.0, kFloatMax, true);
  spec.type = params.string("rope_type", params.string("type", "default"));
  static const char* known[] = {"default", "linear", "dynamic", "llama3", "yarn"};
  bool ok = false;
  for (const char* k : known) ok |= (spec.type == k);
  if (!ok)
    fail("{}: rope type '{}' is not supported (supported: default, linear, dynamic, llama3, yarn)",
         config.source(), spec.type);

  // rotary_dim indexes into every head: it must stay within head_dim (and rotate something).
  const Number partial = params.number("partial_rotary_factor", default_partial_rotary_factor,
                                       "partial_rotary_factor");
  const double share = params.bounded(partial, 0.0, 1.0, true);
  spec.rotary_dim = int(double(head_dim) * share);
  spec.rotary_dim -= spec.rotary_dim % 2;
  if (spec.rotary_dim < 2 || spec.rotary_dim > head_dim)
    fail(
        "{}: {} ({}) × head_dim ({}) leaves a rotary dimension of {}; it must be even, at least 2 "
        "and at most head_dim",
        config.source(), partial.field, share, head_dim, spec.rotary_dim);

  spec.max_position = config.get_int_in_or("max_position_embeddings", 2048, 1,
                                           config_limits::kPositions, "positions are int32");
  spec.factor = params.bounded(params.number("factor", 1.0), 0.0, kFloatMax, true);
  const Number original =
      params.number("original_max_position_embeddings", double(spec.max_position));
  const double orig = params.bounded(original, 1.0, double(config_limits::kPositions));
  if (orig != std::trunc(orig)) config.fail_field(original.field, *original.value, "an integer");
  spec.original_max_position = int64_t(orig);
  spec.low_freq_factor =
      params.bounded(params.number("low_freq_factor", 1.0), 0.0, kFloatMax, true);
  spec.high_freq_factor =
      params.bounded(params.number("high_freq_factor", 4.0), 0.0, kFloatMax, true);
  // llama3 blends between the two wavelengths, dividing by their difference.
  if (spec.type == "llama3" && !(spec.high_freq_factor > spec.low_freq_factor))
    fail("{}: {} ({}) must be greater than {} ({}) for llama3 rope", config.source(),
         params.field("high_freq_factor"), spec.high_freq_factor, params.field("low_freq_factor"),
         spec.low_freq_factor);
  // yarn takes log(original_max_position / (2π·beta)): the betas must be positive.
  spec.beta_fast = params.bounded(params.number("beta_fast", 32.0), 0.0, kFloatMax, true);
  spec.beta_slow = params.bounded(params.number("beta_slow", 1.0), 0.0, kFloatMax, true);
  spec.attention_factor = params.bounded(params.number("attention_factor", 0.0), 0.0, kFloatMax);
  spec.mscale = params.bounded(params.number("mscale", 0.0), -kFloatMax, kFloatMax);
  spec.mscale_all_dim = params.bounded(params.number("mscale_all_dim", 0.0), -kFloatMax, kFloatMax);
  spec.truncate = params.boolean("truncate", true);
  if (spec.type == "yarn" && original.value)
    spec.factor = double(spec.max_position) / double(spec.original_max_position);
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
