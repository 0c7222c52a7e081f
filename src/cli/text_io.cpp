#include "cli/text_io.h"

#include <cstdio>
#include <filesystem>

#include "chat/encode_chat.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

TextCodec::TextCodec(const std::string& model_dir) : dir_(model_dir) {
  if (std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(model_dir));
}
TextCodec::~TextCodec() = default;

std::vector<int32_t> TextCodec::encode(const std::string& text) const {
  if (!tokenizer_)
    fail("{}: this model directory has no tokenizer.json; give the prompt as --prompt-tokens",
         dir_);
  return tokenizer_->encode(text, true);
}

std::vector<int32_t> TextCodec::encode_chat(const std::string& text) const {
  if (!tokenizer_)
    fail("{}: this model directory has no tokenizer.json; give the prompt as --prompt-tokens",
         dir_);
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", text}}};
  return chat::encode_chat(*tokenizer_, messages, "--chat");
}

std::string TextCodec::decode(std::span<const int32_t> ids) const {
  return tokenizer_ ? tokenizer_->decode(ids, true) : std::string();
}

std::vector<int32_t> TextCodec::default_prompt() const {
  if (tokenizer_ && tokenizer_->bos_id()) return {*tokenizer_->bos_id()};
  if (tokenizer_) return tokenizer_->encode("The", false);
  return {0};
}

struct StreamPrinter::Impl {
  bool enabled;
  const TextCodec& codec;
  std::unique_ptr<StreamDecoder> decoder;
};

StreamPrinter::StreamPrinter(const TextCodec& codec, bool enabled)
    : impl_(new Impl{enabled, codec, nullptr}) {
  if (codec.tokenizer()) impl_->decoder = std::make_unique<StreamDecoder>(*codec.tokenizer(), true);
}
StreamPrinter::~StreamPrinter() = default;

void StreamPrinter::push(int32_t token) {
  if (!impl_->enabled) return;
  if (impl_->decoder) {
    std::string piece = impl_->decoder->push(token);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
  } else {
    std::printf("%d ", token);  // no tokenizer: show the ids
  }
  std::fflush(stdout);
}

void StreamPrinter::finish() {
  if (!impl_->enabled) return;
  if (impl_->decoder) {
    std::string rest = impl_->decoder->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
}

}  // namespace hearth::cli
