// Test helper: a copy of a per-expert MoE checkpoint with its experts stacked in another layout —
// transformers 5's fused gate_up_proj [E, 2I, H] + down_proj [E, H, I], or MLX's
// switch_mlp.{gate,up,down}_proj [E, I, H] / [E, H, I] — written with the project's
// SafetensorsWriter. The stacked tensors hold exactly the per-expert bytes.
#pragma once
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "loader/safetensors_writer.h"
#include "loader/weight_store.h"

namespace hearth::test {

// Copies checkpoint `src` (config.json, generation_config.json, weights) to a fresh `dst` with
// every layer's `mlp.experts.N.{gate,up,down}_proj.weight` stacked as `layout` ("fused" or
// "switch_mlp").
inline void moe_restack(const std::filesystem::path& src, const std::filesystem::path& dst,
                        const std::string& layout) {
  namespace fs = std::filesystem;
  fs::remove_all(dst);
  fs::create_directories(dst);
  for (const char* f : {"config.json", "generation_config.json"})
    if (fs::exists(src / f)) fs::copy(src / f, dst / f);
  const WeightStore store = WeightStore::open(src);
  struct Out {
    SafetensorsEntry entry;
    std::vector<const TensorInfo*> parts;  // written one after the other
  };
  std::map<std::string, Out> out;
  // prefix ("...mlp.") → expert → projection → tensor
  std::map<std::string, std::map<int, std::map<std::string, const TensorInfo*>>> experts;
  const std::regex expert_re(R"((.*\.mlp\.)experts\.(\d+)\.(gate|up|down)_proj\.weight)");
  for (const auto& name : store.names()) {
    const TensorInfo* info = store.find(name);
    std::smatch m;
    if (std::regex_match(name, m, expert_re))
      experts[m[1]][std::stoi(m[2])][m[3]] = info;
    else
      out[name] = {{name, info->dtype, info->shape}, {info}};
  }
  for (const auto& layer : experts) {  // not a structured binding: the lambda captures it
    const std::string& prefix = layer.first;
    const auto& by_expert = layer.second;
    const int64_t E = int64_t(by_expert.size());
    const TensorInfo* g0 = by_expert.at(0).at("gate");
    const int64_t I = g0->shape[0], H = g0->shape[1];
    const auto stack = [&](const std::string& name, std::vector<int64_t> shape,
                           std::initializer_list<const char*> projections) {
      Out o{{name, g0->dtype, std::move(shape)}, {}};
      for (const auto& [e, p] : by_expert)
        for (const char* projection : projections) o.parts.push_back(p.at(projection));
      out[name] = std::move(o);
    };
    if (layout == "fused") {
      stack(prefix + "experts.gate_up_proj", {E, 2 * I, H}, {"gate", "up"});
      stack(prefix + "experts.down_proj", {E, H, I}, {"down"});
    } else {
      stack(prefix + "switch_mlp.gate_proj.weight", {E, I, H}, {"gate"});
      stack(prefix + "switch_mlp.up_proj.weight", {E, I, H}, {"up"});
      stack(prefix + "switch_mlp.down_proj.weight", {E, H, I}, {"down"});
    }
  }
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, o] : out) entries.push_back(o.entry);
  SafetensorsWriterOptions options;
  options.metadata = {{"format", "pt"}};
  SafetensorsWriter writer(dst, entries, options);
  for (const auto& [name, o] : out)
    for (const TensorInfo* part : o.parts) writer.write_part(name, part->data, part->nbytes);
  writer.finish();
}

}  // namespace hearth::test
