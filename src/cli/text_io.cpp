#include "cli/text_io.h"

#include <cstdio>
#include <filesystem>

#include "core/error.h"

namespace hearth {
class Tokenizer {};  // replaced by src/tokenizer when it lands
}  // namespace hearth

namespace hearth::cli {

TextCodec::TextCodec(const std::string& model_dir) : dir_(model_dir) {}
TextCodec::~TextCodec() = default;

std::vector<int32_t> TextCodec::encode(const std::string&) const {
  fail("{}: this model directory has no tokenizer.json; give the prompt as --prompt-tokens", dir_);
}
std::vector<int32_t> TextCodec::encode_chat(const std::string& text) const { return encode(text); }
std::string TextCodec::decode(std::span<const int32_t>) const { return ""; }
std::vector<int32_t> TextCodec::default_prompt() const { return {0}; }

struct StreamPrinter::Impl {
  bool enabled;
};
StreamPrinter::StreamPrinter(const TextCodec&, bool enabled) : impl_(new Impl{enabled}) {}
StreamPrinter::~StreamPrinter() = default;
void StreamPrinter::push(int32_t token) {
  if (impl_->enabled) std::printf("%d ", token);
  std::fflush(stdout);
}
void StreamPrinter::finish() {
  if (impl_->enabled) std::printf("\n");
}

}  // namespace hearth::cli
