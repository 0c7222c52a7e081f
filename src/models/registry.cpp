// model_type → architecture. Every supported type is listed here (not self-registered), so the
// static library keeps each architecture and an unknown type's error can list them all.
#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"
#include "loader/config.h"
#include "loader/weight_store.h"
#include "models/llama.h"
#include "models/model.h"

namespace hearth {

namespace {

using Factory = std::function<std::unique_ptr<Model>(const ModelConfig&, WeightStore,
                                                     std::unique_ptr<Backend>)>;

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> table = [] {
    std::map<std::string, Factory> t;
    for (const auto& type : llama_model_types()) t[type] = make_llama_model;
    return t;
  }();
  return table;
}

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu" || device == "auto") return make_cpu_backend();
  if (device.rfind("cuda", 0) == 0)
    fail("device '{}' is not available: this build of hearth has no CUDA backend", device);
  fail("unknown device '{}' (expected cpu, cuda, cuda:N or auto)", device);
}

}  // namespace

std::vector<std::string> supported_model_types() {
  std::vector<std::string> types;
  for (const auto& [name, factory] : factories()) types.push_back(name);
  return types;
}

std::unique_ptr<Model> load_model(const std::filesystem::path& dir, const LoadOptions& options) {
  ModelConfig config = ModelConfig::load(dir);
  auto it = factories().find(config.model_type());
  if (it == factories().end()) {
    std::string list;
    for (const auto& t : supported_model_types()) list += (list.empty() ? "" : ", ") + t;
    fail("{}: model_type '{}' is not supported; supported: {}", config.source(),
         config.model_type(), list);
  }
  auto backend = make_backend(options.device);
  WeightStore weights = WeightStore::open(dir);
  return it->second(config, std::move(weights), std::move(backend));
}

}  // namespace hearth
