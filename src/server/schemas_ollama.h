// Ollama API request schemas (/api/chat, /api/generate) and the small formats its responses use.
// A request becomes the internal ChatRequest the other APIs share (messages as chat templates
// expect them, tools, sampling, stop strings, template kwargs) plus what only Ollama has: the
// model name, stream defaulting to true, num_predict, num_ctx, and /api/generate's raw prompt and
// context. Fields hearth cannot honour (images, format, suffix, template, typical_p, mirostat,
// tfs_z) are a 400 naming the field rather than being dropped; fields that only tune how Ollama
// loads or runs a model (num_gpu, num_thread, keep_alive, ...) are checked and have no effect.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/schemas.h"

namespace hearth::server {

struct OllamaRequest {
  std::string model;
  bool stream = true;  // Ollama streams unless told not to
  // messages (for /api/generate: the system and the prompt as messages), tools, template kwargs
  // (from think), sampling, stop, logprobs.
  ChatRequest chat;
  std::optional<int64_t> num_predict;  // > 0; absent: until the context is full
  std::optional<int64_t> num_ctx;      // the context this request asked for
  bool empty = false;                  // no messages / no prompt: Ollama's "load the model" request
  // /api/generate only.
  bool raw = false;              // the prompt is the whole text, no chat template
  std::string prompt;            // raw: the text to tokenize
  std::vector<int32_t> context;  // token ids of an earlier exchange, put before the prompt
};

// The model name, required ("model", or the older "name").
std::string parse_ollama_model(const ojson& body);
OllamaRequest parse_ollama_chat(const ojson& body);
OllamaRequest parse_ollama_generate(const ojson& body);
// body.options → sampling, stop, num_predict, num_ctx (into r).
void parse_ollama_options(const ojson& body, OllamaRequest& r);

// Whether a requested name is the served model: its id, with or without a tag of ":latest",
// case-insensitive (Ollama's names are).
bool ollama_model_matches(std::string_view requested, std::string_view served_id);
// The name /api/tags lists: the id with ":latest" unless it has a tag already.
std::string ollama_model_name(const std::string& served_id);

// Go's duration syntax as keep_alive takes it ("5m", "1h30m", "-1s", "0"), or a number of
// seconds: true when valid.
bool ollama_keep_alive_valid(const ojson& value);

// "7.6B", "494.03M", "125K": a parameter count the way Ollama prints it.
std::string ollama_parameter_size(int64_t n_params);
// The storage format holding most of the weights, from ModelInfo::formats ("BF16: 596.05 M
// weights, ...; affine 4-bit g64: ..." → "BF16"); "unknown" when there is none.
std::string ollama_quantization_level(std::string_view formats);
// 64 hex digits identifying `identity` (FNV-1a over four seeds): a stable digest for /api/tags.
std::string ollama_digest(std::string_view identity);
// RFC 3339 in UTC with nanoseconds, as Go writes time.Time: "2024-06-04T14:38:31.837530000Z".
std::string ollama_time(std::chrono::system_clock::time_point t);
// The same for seconds since 1970 (for times past what a time_point in nanoseconds holds).
std::string ollama_time_from_unix(int64_t seconds, int64_t nanoseconds = 0);

}  // namespace hearth::server
