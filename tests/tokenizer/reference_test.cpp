// Compares hearth's tokenizer with Hugging Face tokenizers 0.23 on real tokenizer files: ids with
// and without special tokens, decode with and without skipping special tokens, and the
// streaming detokenizer, for every recorded case (tests/data/tokenizer/<name>.json, made by
// tools/reference/make_tokenizer_reference.py). Everything must match exactly.
#include <fmt/format.h>

#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace hearth::test {

std::string utf8_replace_invalid(const std::string& s) { return tok::utf8_lossy(s); }

namespace {

std::string show(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  return out.size() > 80 ? out.substr(0, 80) + "..." : out;
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, EncodeAndDecodeMatchHuggingFace) {
  const Tokenizer* tok = load_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  auto cases = reference_cases(GetParam());
  size_t ok_ids = 0, ok_sp = 0, ok_dec = 0, ok_skip = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    auto ids = tok->encode(c.input, false);
    auto ids_sp = tok->encode(c.input, true);
    std::string dec = tok->decode(c.ids_sp, false);
    std::string dec_skip = tok->decode(c.ids_sp, true);
    ok_ids += ids == c.ids;
    ok_sp += ids_sp == c.ids_sp;
    ok_dec += dec == c.dec;
    ok_skip += dec_skip == c.dec_skip;
    EXPECT_EQ(ids, c.ids) << GetParam() << " case " << i << " \"" << show(c.input) << "\"";
    EXPECT_EQ(ids_sp, c.ids_sp) << GetParam() << " case " << i << " (add_special_tokens)";
    EXPECT_EQ(dec, c.dec) << GetParam() << " case " << i << " decode";
    EXPECT_EQ(dec_skip, c.dec_skip) << GetParam() << " case " << i << " decode skip_special_tokens";
  }
  std::printf("[ %s ] %zu cases: ids %zu, ids+special %zu, decode %zu, decode(skip) %zu match\n",
              GetParam().c_str(), cases.size(), ok_ids, ok_sp, ok_dec, ok_skip);
}

// Streaming: the chunks concatenate to the full decode, and no chunk ends inside a UTF-8
// sequence or carries invalid UTF-8 that the full decode does not have.
TEST_P(ReferenceTest, StreamDecoderMatchesDecode) {
  const Tokenizer* tok = load_tokenizer(GetParam());
  ASSERT_NE(tok, nullptr);
  auto cases = reference_cases(GetParam());
  for (size_t i = 0; i < cases.size(); ++i) {
    for (bool skip : {false, true}) {
      const auto& ids = cases[i].ids_sp;
      StreamDecoder stream(*tok, skip);
      std::string all;
      for (int32_t id : ids) {
        std::string chunk = stream.push(id);
        EXPECT_TRUE(tok::utf8_is_valid(chunk)) << GetParam() << " case " << i;
        all += chunk;
      }
      all += stream.flush();
      EXPECT_EQ(all, skip ? cases[i].dec_skip : cases[i].dec)
          << GetParam() << " case " << i << " skip=" << skip;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ReferenceTest, ::testing::ValuesIn(tokenizer_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hearth::test
