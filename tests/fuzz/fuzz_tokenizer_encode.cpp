// Fuzz target: encoding and decoding with the real tokenizers (Qwen3, Llama 3.1 and DeepSeek V3
// byte-level BPE; Llama 2 SentencePiece-style with byte fallback; Gemma 3), loaded once from
// the files scripts/fetch-test-assets.sh fetches. Input: one selector byte (tokenizer and
// add/skip special tokens), then the text, which is encoded; the ids are decoded and streamed
// through StreamDecoder, whose output must equal the whole decode (its documented invariant).
// The same bytes read as little-endian int32s are decoded too: arbitrary ids, out-of-range
// and negative ones included, as a client's /detokenize or a logit bias can send them.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using hearth::Tokenizer;

const std::vector<std::unique_ptr<Tokenizer>>& tokenizers() {
  static const auto all = [] {
    std::vector<std::unique_ptr<Tokenizer>> v;
    for (const char* name : {"qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3"}) {
      const auto dir = hearth::fuzz::real_tokenizer_dir(name);
      hearth::fuzz::read_required(dir / "tokenizer.json", hearth::fuzz::kFetchHint);
      v.push_back(std::make_unique<Tokenizer>(Tokenizer::load(dir)));
    }
    return v;
  }();
  return all;
}

void check_stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  const std::string whole = tok.decode(ids, skip_special);
  hearth::StreamDecoder stream(tok, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  if (streamed != whole)
    hearth::fuzz::invariant_failed("StreamDecoder output differs from decode()",
                                   "decode:   " + whole + "\nstreamed: " + streamed);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& all = tokenizers();
  const uint8_t selector = data[0];
  const Tokenizer& tok = *all[selector % all.size()];
  const bool add_special = selector & 0x10;
  const bool skip_special = selector & 0x20;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const std::vector<int32_t> ids = tok.encode(text, add_special);
  for (int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size())
      hearth::fuzz::invariant_failed("encode gave an id past vocab_size");
  check_stream(tok, ids, skip_special);

  std::vector<int32_t> raw((size - 1) / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data + 1, raw.size() * 4);
  check_stream(tok, raw, skip_special);
  for (size_t i = 0; i < raw.size() && i < 8; ++i) tok.token_text(raw[i]);
  return 0;
}
