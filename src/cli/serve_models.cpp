#include "cli/serve_models.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "core/error.h"
#include "hub/hf_cache.h"
#include "server/server.h"

namespace hearth::cli {

namespace {

namespace fs = std::filesystem;

bool is_checkpoint(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

// Its size on disk (the safetensors files, links followed) and its config's context length.
server::ModelEntry entry_for(const std::string& id, const fs::path& dir) {
  server::ModelEntry e{id, dir.string()};
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec))
    if (f.path().extension() == ".safetensors") e.bytes += fs::file_size(f.path(), ec);
  std::ifstream in(dir / "config.json");
  const auto config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_object()) {
    const nlohmann::json* c = &config;
    if (config.contains("text_config") && config["text_config"].is_object())
      c = &config["text_config"];  // multimodal wrappers keep it there
    if (c->contains("max_position_embeddings") && (*c)["max_position_embeddings"].is_number())
      e.context = (*c)["max_position_embeddings"].get<int64_t>();
  }
  return e;
}

}  // namespace

std::vector<server::ModelEntry> list_served_models(const std::vector<std::string>& models,
                                                   const std::string& models_dir, bool hf_cache) {
  std::vector<server::ModelEntry> out;
  for (const auto& m : models) {
    const std::string dir = resolve_model_dir(m);
    if (!is_checkpoint(dir)) fail("-m {}: {} has no config.json", m, dir);
    out.push_back(entry_for(server::model_id_for(dir), dir));
  }
  if (!models_dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(models_dir, ec)) fail("--models-dir: {} is not a directory", models_dir);
    std::vector<fs::path> dirs;
    for (const auto& d : fs::directory_iterator(models_dir, ec))
      if (is_checkpoint(d.path())) dirs.push_back(d.path());
    std::sort(dirs.begin(), dirs.end());
    for (const auto& d : dirs) out.push_back(entry_for(d.filename().string(), d));
  }
  if (hf_cache) {
    for (const auto& repo : hub::list_cached_repos(hub::hub_cache_dir())) {
      const hub::CachedRevision* chosen = nullptr;
      for (const auto& r : repo.revisions) {
        if (r.n_broken > 0 || !is_checkpoint(r.dir)) continue;
        const bool main = std::find(r.refs.begin(), r.refs.end(), "main") != r.refs.end();
        if (main || !chosen) chosen = &r;
        if (main) break;
      }
      if (chosen) out.push_back(entry_for(repo.repo_id, chosen->dir));
    }
  }
  std::map<std::string, std::string> seen;
  for (const auto& e : out) {
    auto [it, fresh] = seen.emplace(e.id, e.dir);
    if (!fresh)
      fail("two models are named '{}' ({} and {}): serve them from directories of different names",
           e.id, it->second, e.dir);
  }
  if (out.empty())
    fail("no model to serve: {}", hf_cache ? "the Hugging Face cache has no complete checkpoint"
                                           : "--models-dir holds no checkpoint directory");
  return out;
}

}  // namespace hearth::cli
