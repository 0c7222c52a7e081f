// The hearth command as users run it: forms the issues rely on, and bad arguments ending in a
// one-line error with a non-zero exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "loader/npy.h"
#include "run_command.h"

namespace {

// The hearth binary with `args`: its exit status and stdout and stderr together.
hearth::test::CommandResult run(const std::string& args) {
  return hearth::test::run_command(std::string(HEARTH_BINARY) + " " + args + " 2>&1");
}

const std::string kModel = std::string(HEARTH_TEST_DATA) + "/models/qwen3";

TEST(Cli, VersionNamesTheCommitAndTheBackends) {
  auto r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("hearth " HEARTH_VERSION " (commit "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(commit unknown)"), std::string::npos) << "built from a git checkout";
  EXPECT_NE(r.out.find("backends: cpu"), std::string::npos) << r.out;
#ifdef HEARTH_HAVE_CUDA
  EXPECT_NE(r.out.find(", cuda (sm "), std::string::npos) << r.out;
#endif
}

TEST(Cli, GenerateJsonIsOneLineWithTokensTextAndTimings) {
  auto r = run("generate -m " + kModel +
               " --prompt-tokens 1,2,3 -n 5 --ignore-eos --json --temperature 0");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"].size(), 5u);
  EXPECT_TRUE(j.contains("text"));
  EXPECT_TRUE(j["timings"].contains("generate_tokens_per_s"));
  // Greedy is deterministic.
  auto again =
      nlohmann::json::parse(run("generate -m " + kModel +
                                " --prompt-tokens 1,2,3 -n 5 --ignore-eos --json --temperature 0")
                                .out);
  EXPECT_EQ(j["tokens"], again["tokens"]);
}

TEST(Cli, SeededSamplingRepeats) {
  const std::string args =
      "generate -m " + kModel +
      " --prompt-tokens 4,5 -n 12 --ignore-eos --json --temperature 1.5 --seed 9";
  auto a = nlohmann::json::parse(run(args).out), b = nlohmann::json::parse(run(args).out);
  EXPECT_EQ(a["tokens"], b["tokens"]);
}

TEST(Cli, LogitsWritesOneRowPerToken) {
  auto path = std::filesystem::temp_directory_path() / "hearth_cli_logits.npy";
  auto r = run("logits -m " + kModel + " --tokens 3,1,4,1,5 -o " + path.string());
  ASSERT_EQ(r.status, 0) << r.out;
  auto a = hearth::npy_read(path);
  ASSERT_EQ(a.shape.size(), 2u);
  EXPECT_EQ(a.shape[0], 5);
  EXPECT_EQ(a.shape[1], 256);
  std::filesystem::remove(path);
}

TEST(Cli, InfoDescribesTheCheckpoint) {
  auto r = run("info -m " + kModel);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("qwen3"), std::string::npos);
  EXPECT_NE(r.out.find("BF16"), std::string::npos);
}

TEST(Cli, BenchPrintsRows) {
  auto r = run("bench -m " + kModel + " -p 16 -n 4 -r 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("pp16"), std::string::npos);
  EXPECT_NE(r.out.find("tg4"), std::string::npos);
  EXPECT_NE(r.out.find("±"), std::string::npos);
  // Achieved rates: bytes per second for decode rows, FLOP/s for prefill rows.
  EXPECT_NE(r.out.find("B/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FLOP/s"), std::string::npos) << r.out;
}

void expect_one_line_error(const std::string& args, const std::string& needle) {
  auto r = run(args);
  EXPECT_NE(r.status, 0) << args;
  EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
  // One line: the message ends the output.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

// -d: the tests run on sequences already holding D tokens (rows "@ dD"), alone and batched.
TEST(Cli, BenchAtDepth) {
  auto r = run("bench -m " + kModel + " -p 8 -n 4 -r 1 -d 0,20 --parallel 1,2");
  ASSERT_EQ(r.status, 0) << r.out;
  for (const char* row : {"pp8 |", "tg4 |", "tg4 x2 |", "pp8 @ d20", "tg4 @ d20", "tg4 x2 @ d20"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  expect_one_line_error("bench -m " + kModel + " -d -3", "-d/--depth must be >= 0, got -3");
}

// perplexity --kl-base: the bundled model against its own saved distributions, then a run on
// another context length, which the base file refuses.
TEST(Cli, PerplexityKlBaseOfTheSameModelIsZero) {
  const std::string model = std::string(HEARTH_SOURCE_DIR) + "/models/default";
  const std::string base =
      (std::filesystem::temp_directory_path() / "hearth_cli_kl_base.bin").string();
  const std::string common =
      "perplexity -m " + model + " -f " + model + "/heldout.txt --chunks 2 --kl-base " + base;
  auto saved = run(common + " --ctx 64 --save-logits");
  ASSERT_EQ(saved.status, 0) << saved.out;
  auto same = run(common + " --ctx 64");
  ASSERT_EQ(same.status, 0) << same.out;
  EXPECT_NE(same.out.find("Mean    KLD:   0.000000 +/- 0.000000"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("Same top p : 100.000"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("Mean PPL(Q)/PPL(base)     :   1.000000"), std::string::npos) << same.out;
  // Five tokens per forward (the decode kernels, pieces that do not divide the chunk): the
  // same distributions up to f32 rounding.
  auto pieces = run(common + " --ctx 64 -b 5");
  ASSERT_EQ(pieces.status, 0) << pieces.out;
  const size_t at = pieces.out.find("Mean    KLD:");
  ASSERT_NE(at, std::string::npos) << pieces.out;
  EXPECT_LT(std::fabs(std::stod(pieces.out.substr(at + 12))), 1e-6) << pieces.out;
  auto other_ctx = run(common + " --ctx 32");
  EXPECT_NE(other_ctx.status, 0);
  EXPECT_NE(other_ctx.out.find("written with --ctx 64, this run uses 32"), std::string::npos)
      << other_ctx.out;
  std::filesystem::remove(base);
}

// --tensor-parallel / -tp on generate and bench: the split model's greedy tokens are the whole
// model's; shapes that do not split and GPUs are refused in one line.
TEST(Cli, TensorParallelGeneratesTheWholeModelsTokens) {
  const std::string gen =
      "generate -m " + kModel + " --prompt-tokens 1,2,3 -n 6 --ignore-eos --json --temperature 0";
  auto whole = run(gen);
  ASSERT_EQ(whole.status, 0) << whole.out;
  for (const char* tp : {" -tp 2", " -tp=2", " --tensor-parallel 2"}) {
    auto split = run(gen + tp);
    ASSERT_EQ(split.status, 0) << tp << ": " << split.out;
    EXPECT_EQ(nlohmann::json::parse(split.out)["tokens"],
              nlohmann::json::parse(whole.out)["tokens"])
        << tp;
  }
  auto bench = run("bench -m " + kModel + " -tp 2 -p 8 -n 4 -r 1");
  EXPECT_EQ(bench.status, 0) << bench.out;
  auto odd = run(gen + " -tp 3");
  EXPECT_EQ(odd.status, 1);
  EXPECT_NE(odd.out.find("num_attention_heads (4) must be divisible"), std::string::npos)
      << odd.out;
  auto gpu = run(gen + " -tp 2 --device cuda");
  EXPECT_EQ(gpu.status, 1);
  EXPECT_NE(gpu.out.find("multi-GPU tensor parallelism is not built yet"), std::string::npos)
      << gpu.out;
}

TEST(Cli, BadArgumentsGiveOneLineErrors) {
  expect_one_line_error("generate -m " + kModel + " --no-such-flag", "no-such-flag");
  expect_one_line_error("generate -m " + kModel + " --prompt-tokens 1,99999 -n 2", "99999");
  expect_one_line_error("generate -m " + kModel + " --prompt-tokens 1,x -n 2", "'x'");
  expect_one_line_error("generate -m /nonexistent/model --prompt-tokens 1 -n 2",
                        "/nonexistent/model");
  expect_one_line_error("generate -m " + kModel + " --prompt-tokens 1 -n 2 --top-p 0", "top_p");
  expect_one_line_error("logits -m " + kModel + " --tokens 1 -o /nonexistent/dir/x.npy",
                        "/nonexistent/dir/x.npy");
  expect_one_line_error("generate -m " + kModel + " --prompt-tokens 1 --device cuda:7", "cuda");
  expect_one_line_error("perplexity -m " + kModel + " -f /nonexistent.txt", "/nonexistent.txt");
  expect_one_line_error("perplexity -m " + kModel + " -f /nonexistent.txt --save-logits",
                        "--kl-base");
  expect_one_line_error("perplexity -m " + kModel + " -f /nonexistent.txt -b -1", "--batch");
}

}  // namespace
