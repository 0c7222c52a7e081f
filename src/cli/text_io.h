// TextCodec: the CLI's bridge between text and token ids for a model directory. Models without
// tokenizer.json still work with token ids (text output is then empty).
// StreamPrinter: prints generated text as it arrives, never splitting a UTF-8 sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace hearth {
class Tokenizer;
}

namespace hearth::cli {

class TextCodec {
 public:
  explicit TextCodec(const std::string& model_dir);
  ~TextCodec();
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  std::vector<int32_t> encode(const std::string& text) const;
  // Renders text as one user message through the model's chat template, then encodes.
  std::vector<int32_t> encode_chat(const std::string& text) const;
  std::string decode(std::span<const int32_t> ids) const;
  // The prompt used when none is given: BOS when the model has one, else token 0.
  std::vector<int32_t> default_prompt() const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  std::string dir_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

class StreamPrinter {
 public:
  StreamPrinter(const TextCodec& codec, bool enabled);
  ~StreamPrinter();
  void push(int32_t token);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hearth::cli
