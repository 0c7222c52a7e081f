// hearth's tokenizer: Hugging Face tokenizer.json BPE tokenizers (byte-level: Qwen2/3/3.5,
// Llama 3, DeepSeek V3; SentencePiece-style with ▁ and byte_fallback: Llama 2, Gemma 3) plus
// tokenizer_config.json / special_tokens_map.json (bos/eos/pad, add_bos/add_eos, chat templates).
// Invariants: encode/decode produce exactly what HF tokenizers 0.23 produces for the same files
// (tests/tokenizer compare against recorded references); invalid UTF-8 input is first replaced
// with U+FFFD per maximal invalid subpart; encode/decode never throw and are thread-safe.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json (required), DIR/tokenizer_config.json, DIR/special_tokens_map.json
  // and DIR/chat_template.jinja (optional). Throws hearth::Error naming the file and field.
  static Tokenizer load(const std::filesystem::path& model_dir);
  // Same, from an in-memory tokenizer.json (and optional tokenizer_config.json text); `name` is
  // used in error messages.
  static Tokenizer from_json(std::string_view tokenizer_json,
                             std::string_view tokenizer_config = {},
                             const std::string& name = "tokenizer.json");

  // Text → ids. add_special_tokens adds what the post-processor adds (BOS etc.).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Ids → text. Unknown ids are skipped, as in HF.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The vocabulary string of an id ("Ġthe", "<|im_end|>"); empty for unknown ids.
  std::string token_text(int32_t id) const;
  std::optional<int32_t> token_id(std::string_view token) const;
  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  // Token strings from the config ("" when not set), for chat templates.
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  const std::string& pad_token() const;
  // Whether encode(text, true) starts with BOS / ends with EOS.
  bool adds_bos() const;
  bool adds_eos() const;

  // The chat template named `name` ("default" for a plain string template); "" if none.
  std::string chat_template(std::string_view name = "default") const;
  std::vector<std::string> chat_template_names() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamDecoder;
};

// Incremental detokenizer for streaming: push ids one at a time; the concatenation of every
// push() and the final flush() equals tokenizer.decode(all ids). Never emits a partial UTF-8
// sequence (text whose decode still ends in U+FFFD is held back until more ids arrive).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  std::string flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_ = 0;  // ids_[prefix_, read_) were already emitted; they give context
  size_t read_ = 0;
};

}  // namespace hearth
