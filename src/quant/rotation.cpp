// The sign-Hadamard rotation of the hidden dimension and the role of each checkpoint tensor in it
// (rotation.h). Tensors are classified by their layer-local name against fixed lists: a name in
// the text model that is on none of them is an error, because leaving one reader or writer
// unrotated would silently change what the model computes.
#include "quant/rotation.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "quant/affine.h"

namespace hearth::quant {

int64_t rotation_block(int64_t n) {
  if (n <= 0) return 0;
  const int64_t pow2 = n & -n;  // the largest power of two dividing n
  return pow2 >= 64 ? pow2 : 0;
}

namespace {

// splitmix64: a fixed, documented generator, so a seed means the same signs everywhere.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// x ← x·H_b (Sylvester order, unnormalised) for one block of b values.
void hadamard_block(float* x, int64_t b) {
  for (int64_t h = 1; h < b; h *= 2)
    for (int64_t i = 0; i < b; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], c = x[j + h];
        x[j] = a + c;
        x[j + h] = a - c;
      }
}

}  // namespace

HiddenRotation::HiddenRotation(int64_t n, uint64_t seed)
    : n_(n), block_(rotation_block(n)), seed_(seed) {
  if (block_ == 0)
    fail(
        "--rotate: hidden size {} has no power-of-two factor >= 64 for a block-diagonal "
        "Hadamard rotation",
        n);
  signs_.resize(static_cast<size_t>(n));
  uint64_t state = seed;
  for (int64_t i = 0; i < n; i += 64) {
    const uint64_t bits = splitmix64(state);
    for (int64_t j = i; j < std::min(n, i + 64); ++j)
      signs_[size_t(j)] = (bits >> (j - i)) & 1 ? -1.0f : 1.0f;
  }
}

void HiddenRotation::apply_rows(float* x, int64_t rows) const {
  const float norm = 1.0f / std::sqrt(float(block_));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * n_;
    for (int64_t j = 0; j < n_; ++j) row[j] *= signs_[size_t(j)] * norm;
    for (int64_t b = 0; b < n_; b += block_) hadamard_block(row + b, block_);
  }
}

void HiddenRotation::apply_transposed(float* w, int64_t cols) const {
  const float norm = 1.0f / std::sqrt(float(block_));
  for (int64_t i = 0; i < n_; ++i) {
    const float s = signs_[size_t(i)] * norm;
    for (int64_t c = 0; c < cols; ++c) w[i * cols + c] *= s;
  }
  // The same butterflies as hadamard_block, over whole rows, so each step runs along memory.
  for (int64_t base = 0; base < n_; base += block_)
    for (int64_t h = 1; h < block_; h *= 2)
      for (int64_t i = base; i < base + block_; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          float* a = w + j * cols;
          float* c = w + (j + h) * cols;
          for (int64_t k = 0; k < cols; ++k) {
            const float x = a[k], y = c[k];
            a[k] = x + y;
            c[k] = x - y;
          }
        }
}

namespace {

enum class Norm : uint8_t { None, Input, Ffn };
struct LocalRole {
  RotationRole role;
  Norm norm = Norm::None;
};

// Names inside a decoder layer ("model.layers.N." stripped, expert numbers as "*"). The input
// norm feeds attention / Gated DeltaNet projections; post_attention_layernorm is the pre-MLP norm
// of every pre-norm family hearth runs (routers and shared-expert gates read it too).
const std::map<std::string, LocalRole>& layer_roles() {
  static const std::map<std::string, LocalRole> roles = [] {
    std::map<std::string, LocalRole> m;
    const auto reader = [&](const std::string& module, Norm norm) {
      m[module + ".weight"] = {RotationRole::Reader, norm};
      m[module + ".bias"] = {RotationRole::Keep};  // on the output side: not rotated
    };
    const auto writer = [&](const std::string& module) {
      m[module + ".weight"] = {RotationRole::Writer};
      m[module + ".bias"] = {RotationRole::WriterBias};
    };
    for (const char* p : {"q_proj", "k_proj", "v_proj", "qkv_proj"})
      reader(std::string("self_attn.") + p, Norm::Input);
    for (const char* p :
         {"in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"})
      reader(std::string("linear_attn.") + p, Norm::Input);
    for (const char* p :
         {"mlp.gate_proj", "mlp.up_proj", "mlp.gate_up_proj", "mlp.gate",
          "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj", "mlp.shared_expert_gate",
          "mlp.experts.*.gate_proj", "mlp.experts.*.up_proj"})
      reader(p, Norm::Ffn);
    for (const char* p : {"self_attn.o_proj", "linear_attn.out_proj", "mlp.down_proj",
                          "mlp.shared_expert.down_proj", "mlp.experts.*.down_proj"})
      writer(p);
    m["input_layernorm.weight"] = {RotationRole::Norm};
    m["post_attention_layernorm.weight"] = {RotationRole::Norm};
    for (const char* p : {"self_attn.q_norm.weight", "self_attn.k_norm.weight", "linear_attn.A_log",
                          "linear_attn.dt_bias", "linear_attn.conv1d.weight",
                          "linear_attn.conv1d.bias", "linear_attn.norm.weight"})
      m[p] = {RotationRole::Keep};
    return m;
  }();
  return roles;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// "mlp.experts.12.up_proj.weight" -> "mlp.experts.*.up_proj.weight".
std::string expert_pattern(const std::string& local) {
  const std::string key = "experts.";
  const size_t at = local.find(key);
  if (at == std::string::npos) return local;
  const size_t begin = at + key.size(), end = local.find('.', begin);
  if (end == std::string::npos || !all_digits(local.substr(begin, end - begin))) return local;
  return local.substr(0, begin) + "*" + local.substr(end);
}

bool in_tower(const std::string& name) {
  const std::string path = "." + name;
  for (const char* part :
       {".visual.", ".vision_tower.", ".vision_model.", ".audio_tower.", ".audio_model."})
    if (path.find(part) != std::string::npos) return true;
  return false;
}

bool is_mtp(const std::string& name) {
  return name.starts_with("mtp.") || name.find(".mtp.") != std::string::npos;
}

}  // namespace

RotationPlan rotation_plan(const WeightStore& store) {
  RotationPlan plan;
  std::string prefix;  // of the text model: "model.", "model.language_model.", ...
  const TensorInfo* embed = nullptr;
  for (const auto& name : store.names()) {
    if (!name.ends_with("embed_tokens.weight") || in_tower(name) || is_mtp(name)) continue;
    if (embed) fail("--rotate: two token embeddings, {} and {}", embed->name, name);
    embed = store.find(name);
    prefix = name.substr(0, name.size() - std::string("embed_tokens.weight").size());
  }
  if (!embed || embed->shape.size() != 2)
    fail("--rotate: {} has no 2-D token embedding (*embed_tokens.weight)", store.dir().string());
  plan.hidden = embed->shape[1];
  const int64_t n = plan.hidden;
  const TensorInfo* final_norm = store.find(prefix + "norm.weight");
  if (!final_norm)
    fail("--rotate: {} has no final norm {}norm.weight", store.dir().string(), prefix);

  const auto check_shape = [&](const TensorInfo& t, bool ok, const char* expected) {
    if (!ok)
      fail("--rotate: {} has shape [{}], expected {} with hidden size {}", t.name,
           fmt::join(t.shape, ", "), expected, n);
  };
  const std::string layers = prefix + "layers.";
  bool has_head = false;
  int64_t n_mtp = 0;
  for (const auto& name : store.names()) {
    const TensorInfo* t = store.find(name);
    RotatedTensor out{name, t, RotationRole::Keep, nullptr};
    if (is_mtp(name)) {
      ++n_mtp;
      continue;
    }
    if (t == embed) {
      out.role = RotationRole::Embedding;
    } else if (t == final_norm) {
      out.role = RotationRole::Norm;
    } else if (name.ends_with("lm_head.weight") && !in_tower(name)) {
      out.role = RotationRole::Reader;
      out.gain = final_norm;
      has_head = true;
    } else if (in_tower(name)) {
      // A merger's last linear writes image features into the residual stream.
      if (name.find("merger") != std::string::npos && name.ends_with("linear_fc2.weight"))
        out.role = RotationRole::Writer;
      else if (name.find("merger") != std::string::npos && name.ends_with("linear_fc2.bias"))
        out.role = RotationRole::WriterBias;
    } else if (name.starts_with(layers)) {
      const size_t dot = name.find('.', layers.size());
      const std::string layer = name.substr(layers.size(), dot - layers.size());
      if (dot == std::string::npos || !all_digits(layer))
        fail("--rotate: cannot place tensor {} in a layer", name);
      const std::string local = expert_pattern(name.substr(dot + 1));
      auto it = layer_roles().find(local);
      if (it == layer_roles().end())
        fail(
            "--rotate: does not know how {} meets the residual stream (not a known attention, "
            "Gated DeltaNet, MLP or norm tensor); refusing rather than leave it unrotated",
            name);
      out.role = it->second.role;
      if (it->second.norm != Norm::None) {
        const std::string norm_name =
            name.substr(0, dot + 1) + (it->second.norm == Norm::Input
                                           ? "input_layernorm.weight"
                                           : "post_attention_layernorm.weight");
        out.gain = store.find(norm_name);
        if (!out.gain)
          fail("--rotate: {} reads the residual stream but {} is missing", name, norm_name);
      }
    } else {
      fail(
          "--rotate: does not know how {} meets the residual stream; refusing rather than leave "
          "it unrotated",
          name);
    }
    switch (out.role) {
      case RotationRole::Embedding:
      case RotationRole::Reader:
        check_shape(*t, t->shape.size() == 2 && t->shape[1] == n, "[*, hidden]");
        break;
      case RotationRole::Writer:
        check_shape(*t, t->shape.size() == 2 && t->shape[0] == n, "[hidden, *]");
        break;
      case RotationRole::WriterBias:
      case RotationRole::Norm:
        check_shape(*t, t->shape.size() == 1 && t->shape[0] == n, "[hidden]");
        break;
      case RotationRole::Keep:
        break;
    }
    const bool is_float =
        t->dtype == DType::F32 || t->dtype == DType::F16 || t->dtype == DType::BF16;
    if (out.role != RotationRole::Keep && !is_float)
      fail("--rotate: {} is {}, not F32, F16 or BF16", name, dtype_name(t->dtype));
    if (out.gain) check_shape(*out.gain, out.gain->shape == std::vector<int64_t>{n}, "[hidden]");
    plan.tensors.push_back(out);
  }
  if (!has_head) {
    // The final norm's gain folds into the head only, so the head can no longer be the embedding.
    plan.tensors.push_back({"lm_head.weight", embed, RotationRole::Reader, final_norm});
    plan.untied = true;
    std::sort(plan.tensors.begin(), plan.tensors.end(),
              [](const RotatedTensor& a, const RotatedTensor& b) { return a.name < b.name; });
  }
  if (n_mtp)
    plan.notices.push_back(fmt::format(
        "--rotate: dropped the {} tensors of the MTP head (mtp.*), which are not rotated", n_mtp));
  return plan;
}

std::vector<float> rotated_tensor_f32(const RotatedTensor& t, const HiddenRotation& rotation,
                                      float norm_offset) {
  const TensorInfo& s = *t.source;
  const int64_t numel = int64_t(s.nbytes / dtype_size(s.dtype));
  std::vector<float> v(static_cast<size_t>(numel));
  affine_params_to_f32(static_cast<const uint8_t*>(s.data), s.dtype, numel, v.data());
  const int64_t n = rotation.size();
  switch (t.role) {
    case RotationRole::Keep:
      break;
    case RotationRole::Embedding:
      rotation.apply_rows(v.data(), numel / n);
      break;
    case RotationRole::Reader:
      if (t.gain) {
        std::vector<float> g(static_cast<size_t>(n));
        affine_params_to_f32(static_cast<const uint8_t*>(t.gain->data), t.gain->dtype, n, g.data());
        for (int64_t i = 0; i < numel; ++i) v[size_t(i)] *= g[size_t(i % n)] + norm_offset;
      }
      rotation.apply_rows(v.data(), numel / n);
      break;
    case RotationRole::Writer:
      rotation.apply_transposed(v.data(), numel / n);
      break;
    case RotationRole::WriterBias:
      rotation.apply_rows(v.data(), 1);
      break;
    case RotationRole::Norm:
      std::fill(v.begin(), v.end(), 1.0f - norm_offset);
      break;
  }
  return v;
}

}  // namespace hearth::quant
