// Fuzz target: tokenizer.json (and, after a NUL byte, tokenizer_config.json) through
// Tokenizer::from_json, the path Tokenizer::load takes: the fast vocab/merges reader, every
// normalizer, pre-tokenizer (Split regexes included), post-processor and decoder kind, added
// tokens, special-token and chat-template config. A tokenizer that loads is then used: a few
// fixed texts are encoded and decoded, ids past the vocabulary decoded, and one text streamed
// through StreamDecoder, so a loader that accepts an inconsistent file shows up as a crash.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hearth;
  const auto [tokenizer_json, tokenizer_config] =
      fuzz::split_at_nul(std::string_view(reinterpret_cast<const char*>(data), size));
  std::optional<Tokenizer> tok;
  try {
    tok.emplace(Tokenizer::from_json(tokenizer_json, tokenizer_config, "fuzz/tokenizer.json"));
  } catch (const Error&) {
    return 0;
  }
  static const char* const kTexts[] = {
      "Hello, world! 12345 café",
      "  leading spaces\n\ttabs\r\nand <|im_start|>special<|im_end|> <s></s>",
      "日本語のテキスト 😀 \xff\xfe invalid bytes",
      "",
  };
  const int32_t n_vocab = tok->vocab_size();
  for (const char* text : kTexts) {
    for (bool add_special : {false, true}) {
      const std::vector<int32_t> ids = tok->encode(text, add_special);
      for (int32_t id : ids)
        if (id < 0 || id >= n_vocab) fuzz::invariant_failed("encode gave an id past vocab_size");
      tok->decode(ids, false);
      tok->decode(ids, true);
    }
  }
  const std::vector<int32_t> odd_ids = {-1, 0, 1, n_vocab - 1, n_vocab, n_vocab + 7, INT32_MAX};
  tok->decode(odd_ids, false);
  for (int32_t id : odd_ids) {
    tok->token_text(id);
    tok->is_special(id);
  }
  StreamDecoder stream(*tok);
  for (int32_t id : tok->encode(kTexts[0], true)) stream.push(id);
  stream.flush();
  tok->chat_template();
  tok->chat_template_names();
  return 0;
}
