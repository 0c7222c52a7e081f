// Finding the MoE experts to stack: by name, as mlx-lm's sanitize() does (qwen3_moe stacks
// `experts.N.*_proj.weight`, qwen3_5_moe splits `experts.gate_up_proj` at its middle row).
#include "quant/quantize_experts.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"

namespace hearth::quant {

namespace {

constexpr std::string_view kExperts = "mlp.experts.";
constexpr std::string_view kSwitchMlp = "mlp.switch_mlp.";
constexpr std::string_view kWeight = ".weight";

// Where `part` starts a whole dot-separated part of `name`, or npos.
size_t find_part(const std::string& name, std::string_view part) {
  for (size_t at = name.find(part); at != std::string::npos; at = name.find(part, at + 1))
    if (at == 0 || name[at - 1] == '.') return at;
  return std::string::npos;
}

bool is_projection(std::string_view s) {
  return s == "gate_proj" || s == "up_proj" || s == "down_proj";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string without_weight(const std::string& name) {
  return name.ends_with(kWeight) ? name.substr(0, name.size() - kWeight.size()) : std::string();
}

// "12" -> 12; -1 unless canonical decimal digits (no sign, no leading zero) of a sane size.
int64_t expert_index(std::string_view digits) {
  if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) return -1;
  int64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// One projection of one layer's per-expert weights: "model.layers.0.mlp." + "up_proj".
struct PerExpertKey {
  std::string prefix, projection;
  auto operator<=>(const PerExpertKey&) const = default;
};

// Expert e of a stacked tensor [E, rows_per_expert, cols], rows [offset, offset + rows) of it.
InputMatrix expert_rows(const PlanSource& s, int64_t e, int64_t offset, int64_t rows) {
  const int64_t per_expert = s.info->shape[1], cols = s.info->shape[2];
  return {s, e * per_expert + offset, rows, cols, {}};
}

class Planner {
 public:
  // Experts 0..E-1 of one projection, each its own 2-D tensor.
  void add_per_expert(const PerExpertKey& key, const std::map<int64_t, PlanSource>& experts);
  // A fused gate_up_proj [E, 2I, H]: gate rows first.
  void add_fused_gate_up(const std::string& prefix, const PlanSource& s);
  // A tensor that is already one stack: fused down_proj [E, H, I], MLX switch_mlp [E, out, in].
  void add_whole(const std::string& module, const PlanSource& s);

  StackedExpertsPlan finish() {
    std::sort(plan_.stacks.begin(), plan_.stacks.end(),
              [](const StackedExperts& a, const StackedExperts& b) {
                return a.inputs.front() < b.inputs.front();
              });
    return std::move(plan_);
  }

 private:
  void add(StackedExperts stack) {
    for (const auto& other : plan_.stacks)
      if (other.module == stack.module)
        fail("{} and {} would both become {}: the checkpoint holds these experts twice",
             other.inputs.front(), stack.inputs.front(), stack.module);
    plan_.stacks.push_back(std::move(stack));
  }
  bool is_3d(const PlanSource& s, const char* expected) {
    if (s.info->shape.size() == 3 && s.info->shape[0] > 0) return true;
    plan_.notices.push_back(fmt::format("{} stays as it is, not stacked: shape {} is not {}",
                                        s.name, shape_str(s.info->shape), expected));
    return false;
  }

  StackedExpertsPlan plan_;
};

void Planner::add_per_expert(const PerExpertKey& key,
                             const std::map<int64_t, PlanSource>& experts) {
  const std::string pattern = key.prefix + "experts.*." + key.projection;
  const std::string module = key.prefix + "switch_mlp." + key.projection;
  const auto keep = [&](const std::string& why) {
    plan_.notices.push_back(
        fmt::format("{} stays per expert, not stacked into {}: {}", pattern, module, why));
  };
  const int64_t n = int64_t(experts.size());
  if (experts.rbegin()->first != n - 1) {
    for (int64_t e = 0; e < n; ++e)
      if (!experts.count(e)) return keep(fmt::format("expert {} is missing", e));
  }
  const TensorInfo& first = *experts.begin()->second.info;
  if (first.shape.size() != 2) return keep("expert 0 is " + shape_str(first.shape) + ", not 2-D");
  StackedExperts stack{module, {}, {}};
  for (const auto& [e, s] : experts) {
    if (s.info->shape != first.shape || s.info->dtype != first.dtype)
      return keep(fmt::format("expert {} is {} {} where expert 0 is {} {}", e,
                              shape_str(s.info->shape), dtype_name(s.info->dtype),
                              shape_str(first.shape), dtype_name(first.dtype)));
    stack.experts.push_back(input_matrix_whole(s));
    stack.inputs.push_back(s.name);
  }
  std::sort(stack.inputs.begin(), stack.inputs.end());
  add(std::move(stack));
}

void Planner::add_fused_gate_up(const std::string& prefix, const PlanSource& s) {
  if (!is_3d(s, "[experts, 2 · intermediate, hidden]")) return;
  const int64_t E = s.info->shape[0], I = s.info->shape[1] / 2;
  if (s.info->shape[1] % 2 != 0) {
    plan_.notices.push_back(fmt::format(
        "{} stays as it is, not stacked: {} rows per expert cannot be split into gate and up",
        s.name, s.info->shape[1]));
    return;
  }
  StackedExperts gate{prefix + "switch_mlp.gate_proj", {}, {s.name}};
  StackedExperts up{prefix + "switch_mlp.up_proj", {}, {s.name}};
  for (int64_t e = 0; e < E; ++e) {
    gate.experts.push_back(expert_rows(s, e, 0, I));
    up.experts.push_back(expert_rows(s, e, I, I));
  }
  add(std::move(gate));
  add(std::move(up));
}

void Planner::add_whole(const std::string& module, const PlanSource& s) {
  if (!is_3d(s, "[experts, out, in]")) return;
  StackedExperts stack{module, {}, {s.name}};
  for (int64_t e = 0; e < s.info->shape[0]; ++e)
    stack.experts.push_back(expert_rows(s, e, 0, s.info->shape[1]));
  add(std::move(stack));
}

}  // namespace

InputMatrix input_matrix_whole(const PlanSource& source) {
  const auto& shape = source.info->shape;
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const int64_t cols = shape.empty() ? 1 : shape.back();
  return {source, 0, cols ? numel / cols : 0, cols, without_weight(source.name)};
}

StackedExpertsPlan stacked_experts_plan(const std::vector<PlanSource>& sources) {
  Planner planner;
  std::map<PerExpertKey, std::map<int64_t, PlanSource>> per_expert;
  for (const auto& s : sources) {
    if (const size_t at = find_part(s.name, kExperts); at != std::string::npos) {
      const std::string prefix = s.name.substr(0, at + 4);  // "....mlp."
      const std::string rest = s.name.substr(at + kExperts.size());
      const size_t dot = rest.find('.');
      const int64_t e = expert_index(std::string_view(rest).substr(0, dot));
      if (e >= 0 && rest.ends_with(kWeight)) {
        const std::string projection = rest.substr(dot + 1, rest.size() - kWeight.size() - dot - 1);
        if (is_projection(projection)) per_expert[{prefix, projection}][e] = s;
      } else if (rest == "gate_up_proj" || rest == "gate_up_proj.weight") {
        planner.add_fused_gate_up(prefix, s);
      } else if (rest == "down_proj" || rest == "down_proj.weight") {
        planner.add_whole(prefix + "switch_mlp.down_proj", s);
      }
    } else if (const size_t sw = find_part(s.name, kSwitchMlp); sw != std::string::npos) {
      const std::string rest = s.name.substr(sw + kSwitchMlp.size());
      if (rest.ends_with(kWeight) && is_projection(without_weight(rest)))
        planner.add_whole(without_weight(s.name), s);
    }
  }
  for (const auto& [key, experts] : per_expert) planner.add_per_expert(key, experts);
  return planner.finish();
}

}  // namespace hearth::quant
