// Loading a broken checkpoint is an error that names what is wrong, never a crash: unknown
// model_type (the message lists the supported ones), a tensor missing, an extra tensor the
// architecture does not consume, a shape that disagrees with config.json, a corrupt file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "fixture.h"
#include "models/model.h"

namespace hearth {
namespace {

namespace fs = std::filesystem;

// A private copy of a fixture directory that a test may break.
struct ScratchModel {
  fs::path dir;
  explicit ScratchModel(const std::string& name) {
    dir = fs::temp_directory_path() / ("hearth_load_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::copy(test::fixture_root() + "/qwen3", dir, fs::copy_options::recursive);
  }
  ~ScratchModel() { fs::remove_all(dir); }
  nlohmann::json config() const {
    return nlohmann::json::parse(std::ifstream(dir / "config.json"));
  }
  void set_config(const nlohmann::json& j) const { std::ofstream(dir / "config.json") << j.dump(); }
};

std::string load_error(const fs::path& dir) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LoadErrors, UnknownModelTypeListsSupported) {
  ScratchModel m("type");
  auto c = m.config();
  c["model_type"] = "mamba9";
  m.set_config(c);
  const std::string e = load_error(m.dir);
  EXPECT_NE(e.find("mamba9"), std::string::npos) << e;
  EXPECT_NE(e.find("qwen3"), std::string::npos) << e;
  EXPECT_NE(e.find("gemma2"), std::string::npos) << e;
}

TEST(LoadErrors, ShapeDisagreesWithConfig) {
  ScratchModel m("shape");
  auto c = m.config();
  c["intermediate_size"] = c["intermediate_size"].get<int>() + 8;
  m.set_config(c);
  const std::string e = load_error(m.dir);
  EXPECT_NE(e.find("mlp.gate_proj.weight"), std::string::npos) << e;
}

TEST(LoadErrors, ExtraTensorIsUnconsumed) {
  ScratchModel m("extra");
  auto c = m.config();
  c["num_hidden_layers"] = c["num_hidden_layers"].get<int>() - 1;  // the last layer is left over
  c.erase("layer_types");
  m.set_config(c);
  const std::string e = load_error(m.dir);
  EXPECT_NE(e.find("unused"), std::string::npos) << e;
  EXPECT_NE(e.find("model.layers."), std::string::npos) << e;
}

TEST(LoadErrors, MissingTensorIsNamed) {
  ScratchModel m("missing");
  auto c = m.config();
  c["tie_word_embeddings"] = false;  // now lm_head.weight is required and absent
  m.set_config(c);
  const std::string e = load_error(m.dir);
  EXPECT_NE(e.find("lm_head.weight"), std::string::npos) << e;
}

TEST(LoadErrors, MissingFilesAndBadConfig) {
  EXPECT_NE(load_error("/nonexistent/hearth/model").find("/nonexistent/hearth/model"),
            std::string::npos);
  ScratchModel m("badjson");
  std::ofstream(m.dir / "config.json") << "{ not json";
  EXPECT_NE(load_error(m.dir).find("config.json"), std::string::npos);
  ScratchModel m2("nofile");
  fs::remove(m2.dir / "model.safetensors");
  EXPECT_FALSE(load_error(m2.dir).empty());
}

TEST(LoadErrors, TruncatedWeightsNeverCrash) {
  ScratchModel m("trunc");
  const auto path = m.dir / "model.safetensors";
  const auto size = fs::file_size(path);
  for (auto keep : {size_t(0), size_t(7), size_t(100), size_t(size / 2), size_t(size - 1)}) {
    fs::resize_file(path, keep);
    EXPECT_FALSE(load_error(m.dir).empty()) << "kept " << keep << " bytes";
  }
}

TEST(LoadErrors, ImpossibleConfigValues) {
  ScratchModel m("values");
  auto c = m.config();
  c["num_key_value_heads"] = 3;  // does not divide num_attention_heads
  m.set_config(c);
  EXPECT_NE(load_error(m.dir).find("num_key_value_heads"), std::string::npos);
  c = m.config();
  c["hidden_size"] = -64;
  m.set_config(c);
  EXPECT_NE(load_error(m.dir).find("hidden_size"), std::string::npos);
  c = m.config();
  c["hidden_size"] = "wide";
  m.set_config(c);
  EXPECT_NE(load_error(m.dir).find("hidden_size"), std::string::npos);
}

}  // namespace
}  // namespace hearth
