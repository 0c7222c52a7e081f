// `hearth chat` with piped input, as a script or another program drives it: messages, multi-line
// input, the commands, the prompt cache across turns, and thinking kept apart from the answer.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "run_command.h"

namespace {

namespace fs = std::filesystem;

struct ChatRun {
  int status;
  std::string out;  // stdout: the replies
  std::string err;  // stderr: notes and per-reply stats
};

class CliChat : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hearth_chat_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ChatRun chat(const std::string& args, const std::string& input) {
    std::ofstream(dir_ / "input") << input;
    const std::string cmd = std::string(HEARTH_BINARY) + " chat -t 2 --temperature 0 " + args +
                            " < " + (dir_ / "input").string() + " 2> " + (dir_ / "err").string();
    const hearth::test::CommandResult r = hearth::test::run_command(cmd);
    std::ifstream err_in(dir_ / "err");
    std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
    return {r.status, r.out, err};
  }

  // The "(N cached)" figures of the per-reply stats lines, in order.
  static std::vector<int> cached_counts(const std::string& err) {
    std::vector<int> counts;
    std::regex re(R"(\((\d+) cached\))");
    for (auto it = std::sregex_iterator(err.begin(), err.end(), re); it != std::sregex_iterator();
         ++it)
      counts.push_back(std::stoi((*it)[1]));
    return counts;
  }

  fs::path dir_;
};

TEST_F(CliChat, RepliesToEachMessageAndReusesEarlierTurns) {
  auto r = chat("-n 8", "Hello there.\nAnd again.\n");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto cached = cached_counts(r.err);
  ASSERT_EQ(cached.size(), 2u) << r.err;
  EXPECT_EQ(cached[0], 0);
  // The second turn's prompt starts with the first turn and its reply: taken from the cache.
  EXPECT_GT(cached[1], 5) << r.err;
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos);
  EXPECT_FALSE(r.out.empty());
}

TEST_F(CliChat, SaveWritesTheConversationAndLoadContinuesIt) {
  const fs::path saved = dir_ / "conversation.json";
  auto r = chat("-n 4",
                "/system Be brief.\n"
                "First line\\\nsecond line\n"
                "\"\"\"\nA block\nof lines\n\"\"\"\n"
                "//slash at the start\n"
                "/save " +
                    saved.string() + "\n");
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(std::ifstream(saved));
  EXPECT_EQ(doc["system"], "Be brief.");
  ASSERT_EQ(doc["messages"].size(), 6u) << doc.dump();
  EXPECT_EQ(doc["messages"][0]["content"], "First line\nsecond line");
  EXPECT_EQ(doc["messages"][2]["content"], "A block\nof lines");
  EXPECT_EQ(doc["messages"][4]["content"], "/slash at the start");
  EXPECT_EQ(doc["messages"][1]["role"], "assistant");

  // /load continues it: the next reply's prompt holds the loaded turns; /reset forgets them.
  auto more = chat("-n 4", "/load " + saved.string() + "\nOne more.\n/reset\nFresh start.\n");
  ASSERT_EQ(more.status, 0) << more.err;
  EXPECT_NE(more.err.find("loaded 6 messages"), std::string::npos) << more.err;
  EXPECT_NE(more.err.find("conversation cleared"), std::string::npos) << more.err;
  std::regex prompt_re(R"(prompt (\d+) tokens)");
  std::vector<int> prompts;
  for (auto it = std::sregex_iterator(more.err.begin(), more.err.end(), prompt_re);
       it != std::sregex_iterator(); ++it)
    prompts.push_back(std::stoi((*it)[1]));
  ASSERT_EQ(prompts.size(), 2u) << more.err;
  EXPECT_GT(prompts[0], prompts[1] + 10);
}

TEST_F(CliChat, BadCommandsAndFilesAreNotesNotExits) {
  std::ofstream(dir_ / "bad.json") << R"({"messages": [{"role": "tool", "content": "x"}]})";
  auto r =
      chat("-n 2", "/frobnicate\n/load " + (dir_ / "missing.json").string() + "\n/load " +
                       (dir_ / "bad.json").string() + "\n/save\nStill here?\n/bye\nNot sent\n");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("unknown command /frobnicate"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("cannot read"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("message 0 must be"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/save needs a file name"), std::string::npos) << r.err;
  // One reply (to "Still here?"); /bye ends the session before the last line.
  EXPECT_EQ(cached_counts(r.err).size(), 1u) << r.err;
}

// A template whose generation prompt opens a think block: the reply is the model's thinking
// until it closes it, kept out of the answer (shown between <think> tags with --show-thinking).
TEST_F(CliChat, ThinkingStaysApartFromTheAnswer) {
  const fs::path model = dir_ / "thinking-model";
  fs::create_directories(model);
  const fs::path base = fs::path(HEARTH_SOURCE_DIR) / "models/default";
  for (const char* f :
       {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"})
    fs::create_symlink(base / f, model / f);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(base / "tokenizer_config.json"));
  config["chat_template"] =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
  std::ofstream(model / "tokenizer_config.json") << config.dump();

  auto hidden = chat("-m " + model.string() + " -n 6", "Think.\n");
  ASSERT_EQ(hidden.status, 0) << hidden.err;
  EXPECT_EQ(hidden.out.find_first_not_of('\n'), std::string::npos)
      << "thinking printed as the answer: " << hidden.out;

  auto shown = chat("-m " + model.string() + " -n 6 --show-thinking", "Think.\n");
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_EQ(shown.out.rfind("<think>\n", 0), 0u) << shown.out;
  EXPECT_NE(shown.out.find("\n</think>\n"), std::string::npos) << shown.out;
}

}  // namespace
