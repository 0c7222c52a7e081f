// Tokenizer behaviour that the real-file references do not reach: errors on malformed
// tokenizer.json (they must name the file and JSON path), components unused by the five
// reference tokenizers (Metaspace, Digits, Whitespace, Lowercase, unk/byte_fallback, ...) on tiny
// hand-written tokenizers, a linear-time guard for huge words, the config accessors and the CLI.
#include <chrono>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

namespace hearth::test {
namespace {

// A BPE tokenizer.json with the given pieces (JSON text for each component).
std::string make_json(const std::string& vocab, const std::string& merges,
                      const std::string& pre = "null", const std::string& normalizer = "null",
                      const std::string& decoder = "null", const std::string& model_extra = "",
                      const std::string& added = "[]", const std::string& post = "null") {
  return R"({"version":"1.0","added_tokens":)" + added + R"(,"normalizer":)" + normalizer +
         R"(,"pre_tokenizer":)" + pre + R"(,"post_processor":)" + post + R"(,"decoder":)" +
         decoder + R"(,"model":{"type":"BPE")" + model_extra + R"(,"vocab":)" + vocab +
         R"(,"merges":)" + merges + "}}";
}

std::string error_of(const std::string& json) {
  try {
    (void)Tokenizer::from_json(json);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerErrors, MalformedFilesNameThePlace) {
  const std::string v = R"({"a":0,"b":1,"ab":2})";
  EXPECT_NE(error_of("{").find("tokenizer.json: invalid JSON at byte"), std::string::npos)
      << error_of("{");
  EXPECT_EQ(
      error_of(make_json(v, R"(["a b", "a b c"])")),
      "tokenizer.json: model.merges[1]: expected two tokens separated by one space, got \"a b c\"");
  EXPECT_EQ(error_of(make_json(v, R"([["a"]])")),
            "tokenizer.json: model.merges[0]: expected two tokens");
  EXPECT_EQ(error_of(make_json(v, R"([["a", "b", "c"]])")),
            "tokenizer.json: model.merges[0]: expected two tokens");
  EXPECT_EQ(error_of(make_json(v, R"(["a x"])")),
            "tokenizer.json: model.merges[0]: token \"x\" is not in the vocabulary");
  EXPECT_EQ(error_of(make_json(R"({"a":0,"b":"1"})", "[]")),
            "tokenizer.json: model.vocab[\"b\"]: expected an integer id");
  EXPECT_EQ(error_of(R"({"model":{"type":"Unigram","vocab":[]}})"),
            "tokenizer.json: model.type: unsupported model \"Unigram\" (hearth supports BPE)");
  EXPECT_EQ(error_of(R"({"added_tokens":[]})"), "tokenizer.json: model: missing");
  EXPECT_EQ(error_of(make_json(v, "[]", R"({"type":"Frobnicate"})")),
            "tokenizer.json: pre_tokenizer.type: unsupported pre-tokenizer \"Frobnicate\"");
  EXPECT_NE(
      error_of(
          make_json(
              v, "[]",
              R"({"type":"Split","pattern":{"Regex":"(["},"behavior":"Isolated","invert":false})"))
          .find("tokenizer.json: pre_tokenizer.pattern: regex \"([\" does not compile"),
      std::string::npos);
  EXPECT_EQ(error_of(make_json(v, "[]", "null", "null", "null", "", R"([{"id":5}])")),
            "tokenizer.json: added_tokens[0].content: missing");
  EXPECT_EQ(error_of(make_json(v, "[]", "null", "null",
                               R"({"type":"Sequence","decoders":[{"type":"Nope"}]})")),
            "tokenizer.json: decoder.decoders[0].type: unsupported decoder \"Nope\"");
  try {
    (void)Tokenizer::load("/nonexistent/model");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model/tokenizer.json: cannot read"),
              std::string::npos)
        << e.what();
  }
}

// encode() emits a post-processor's ids as they are, so ids the file has no token for are a load
// error (found by fuzz_tokenizer_load: a TemplateProcessing whose added token was missing made
// encode return an id past vocab_size()).
TEST(TokenizerErrors, PostProcessorIdsMustBeTokens) {
  const std::string v = R"({"a":0,"b":1})";
  const std::string added = R"([{"id":2,"content":"<s>","special":true}])";
  auto post = [](int id) {
    return R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},)"
           R"({"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[)" +
           std::to_string(id) + R"(],"tokens":["<s>"]}}})";
  };
  const Tokenizer ok =
      Tokenizer::from_json(make_json(v, "[]", "null", "null", "null", "", added, post(2)));
  EXPECT_EQ(ok.encode("ab", true), (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(error_of(make_json(v, "[]", "null", "null", "null", "", "[]", post(2))),
            "tokenizer.json: post_processor: special token id 2 is not in the vocabulary (2 ids)");
  EXPECT_EQ(error_of(make_json(v, "[]", "null", "null", "null", "", added, post(-1))),
            "tokenizer.json: post_processor: special token id -1 is not in the vocabulary (3 ids)");
  EXPECT_EQ(error_of(make_json(v, "[]", "null", "null", "null", "", added,
                               R"({"type":"BertProcessing","sep":["</s>",7],"cls":["<s>",2]})")),
            "tokenizer.json: post_processor: special token id 7 is not in the vocabulary (3 ids)");
}

// JSON text must be UTF-8 (found by fuzz_tokenizer_load: an invalid byte in a Split behaviour made
// the error message's dump() throw a JSON library exception instead of naming the place).
TEST(TokenizerErrors, InvalidUtf8IsAnError) {
  const std::string v = R"({"a":0,"b":1})";
  const std::string doc =
      make_json(v, "[]",
                "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Isol\xe9ted\","
                "\"invert\":false}");
  const size_t at = doc.find('\xe9');
  EXPECT_EQ(error_of(doc), "tokenizer.json: invalid JSON at byte " + std::to_string(at) +
                               ": invalid UTF-8 in string");
  // A truncated sequence, an overlong form and an encoded surrogate are refused in keys too.
  for (const char* bad : {"\xc3", "\xc0\xaf", "\xed\xa0\x80"})
    EXPECT_NE(error_of(make_json(std::string("{\"a\":0,\"") + bad + "\":1}", "[]"))
                  .find("invalid UTF-8 in string"),
              std::string::npos)
        << bad;
  // Valid multi-byte text still loads.
  EXPECT_EQ(
      Tokenizer::from_json(make_json("{\"\xc3\xa9\":0,\"\xe2\x96\x81\":1}", "[]")).token_text(1),
      "\xe2\x96\x81");
}

// Ids index dense tables, so an id far past the number of tokens is refused instead of sizing
// them (found by fuzz_tokenizer_load: an id of 2^31 - 1 overflowed max_id + 1, and 3e8 asked
// for 9.6 GB). Holes of up to kMaxTokenIdHoles still load.
TEST(TokenizerErrors, IdsFarPastTheVocabularyAreErrors) {
  EXPECT_EQ(error_of(make_json(R"({"a":0,"b":2147483647})", "[]")),
            "tokenizer.json: model.vocab[\"b\"]: id 2147483647 is far past the 2 tokens of the "
            "vocabulary");
  EXPECT_EQ(error_of(make_json(R"({"a":0})", "[]", "null", "null", "null", "",
                               R"([{"id":300000000,"content":"<x>"}])")),
            "tokenizer.json: added_tokens[0].id: 300000000 is far past the 2 tokens of the "
            "vocabulary and added_tokens");
  const auto holes =
      Tokenizer::from_json(make_json(R"({"a":0,"b":1000})", "[]", "null", "null", "null", "",
                                     R"([{"id":50000,"content":"<x>"}])"));
  EXPECT_EQ(holes.vocab_size(), 50001);
  EXPECT_EQ(holes.token_text(1000), "b");
  EXPECT_EQ(holes.encode("<x>a", false), (std::vector<int32_t>{50000, 0}));
}

TEST(TokenizerComponents, MergesInBothFormatsAndRankOrder) {
  const std::string v = R"({"a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5})";
  for (const char* merges : {R"(["b c", "a b", "a bc"])", R"([["b","c"],["a","b"],["a","bc"]])"}) {
    auto tok = Tokenizer::from_json(make_json(v, merges));
    EXPECT_EQ(tok.encode("abc", false), (std::vector<int32_t>{5}));  // b+c first, then a+bc
    EXPECT_EQ(tok.encode("ab", false), (std::vector<int32_t>{3}));
    EXPECT_EQ(tok.encode("cab", false), (std::vector<int32_t>{2, 3}));
  }
}

TEST(TokenizerComponents, UnknownCharsFuseOrFallBackToBytes) {
  const std::string v = R"({"<unk>":0,"a":1,"<0xC3>":2,"<0xA9>":3})";
  auto fused = Tokenizer::from_json(
      make_json(v, "[]", "null", "null", "null", R"(,"unk_token":"<unk>","fuse_unk":true)"));
  EXPECT_EQ(fused.encode("axyza", false), (std::vector<int32_t>{1, 0, 1}));
  auto unfused =
      Tokenizer::from_json(make_json(v, "[]", "null", "null", "null", R"(,"unk_token":"<unk>")"));
  EXPECT_EQ(unfused.encode("axya", false), (std::vector<int32_t>{1, 0, 0, 1}));
  auto bytes = Tokenizer::from_json(make_json(v, "[]", "null", "null", R"({"type":"ByteFallback"})",
                                              R"(,"unk_token":"<unk>","byte_fallback":true)"));
  EXPECT_EQ(bytes.encode("a\xC3\xA9x", false), (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(bytes.decode(std::vector<int32_t>{1, 2, 3}), "a\xC3\xA9");
  EXPECT_EQ(bytes.decode(std::vector<int32_t>{2, 1}),
            "\xEF\xBF\xBD"
            "a");  // lone lead byte → U+FFFD
}

// ByteFallback decodes a run of <0xXX> tokens as a whole, one U+FFFD per byte when the run is not
// valid UTF-8, so a streamed byte token's text is final only when its run ends (found by
// fuzz_tokenizer_encode: <0x34> streamed as "4", then <0xDD> made the full decode "\uFFFD\uFFFD").
TEST(TokenizerComponents, StreamDecoderWaitsForTheEndOfAByteRun) {
  const std::string v =
      R"({"<unk>":0,"<0x34>":1,"<0xDD>":2,"<0xE6>":3,"<0x97>":4,"<0xA5>":5,"a":6,"</s>":7})";
  const std::string added = R"([{"id":7,"content":"</s>","special":true}])";
  const auto tok = Tokenizer::from_json(
      make_json(v, "[]", "null", "null",
                R"({"type":"Sequence","decoders":[{"type":"ByteFallback"},{"type":"Fuse"}]})",
                R"(,"unk_token":"<unk>","byte_fallback":true)", added));
  const std::vector<std::vector<int32_t>> cases = {
      {1, 2}, {1, 2, 6}, {3, 4, 5}, {3, 4, 5, 2, 6}, {6, 1, 7, 2}, {1, 99, 2}, {6, 3, 4}};
  for (const auto& ids : cases) {
    for (bool skip : {false, true}) {
      StreamDecoder stream(tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      EXPECT_EQ(streamed, tok.decode(ids, skip))
          << "ids " << testing::PrintToString(ids) << " skip=" << skip;
    }
  }
  EXPECT_EQ(tok.decode(std::vector<int32_t>{1, 2}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // A run that ends is released at once: the token after it brings the whole run.
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(3), "");
  EXPECT_EQ(stream.push(4), "");
  EXPECT_EQ(stream.push(5), "");
  EXPECT_EQ(stream.push(6),
            "\xE6\x97\xA5"
            "a");
}

TEST(TokenizerComponents, MetaspacePreTokenizerAndDecoder) {
  // ▁ is U+2581.
  const std::string v = R"({"▁":0,"h":1,"i":2,"▁h":3,"▁hi":4,"x":5})";
  const std::string meta =
      R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})";
  auto tok = Tokenizer::from_json(make_json(v, R"(["▁ h","▁h i"])", meta, "null", meta));
  EXPECT_EQ(tok.encode("hi hi", false), (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(tok.encode("hi  x", false), (std::vector<int32_t>{4, 0, 0, 5}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{4, 4}), "hi hi");  // first ▁ dropped (prepend_scheme)
  const std::string first =
      R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false})";
  auto tok2 = Tokenizer::from_json(
      make_json(v, R"(["▁ h","▁h i"])", first, "null", "null", "",
                R"([{"id":5,"content":"x","special":true,"normalized":false}])"));
  EXPECT_EQ(tok2.encode("hi", false), (std::vector<int32_t>{4}));
  EXPECT_EQ(tok2.encode("xhi", false), (std::vector<int32_t>{5, 1, 2}));  // not at the start: no ▁
}

TEST(TokenizerComponents, DigitsWhitespaceLowercaseStrip) {
  const std::string v = R"({"a":0,"b":1,"1":2,"2":3,"12":4," ":5,"A":6})";
  auto digits = Tokenizer::from_json(
      make_json(v, R"(["1 2"])", R"({"type":"Digits","individual_digits":true})"));
  EXPECT_EQ(digits.encode("a12b", false), (std::vector<int32_t>{0, 2, 3, 1}));
  auto grouped = Tokenizer::from_json(
      make_json(v, R"(["1 2"])", R"({"type":"Digits","individual_digits":false})"));
  EXPECT_EQ(grouped.encode("a12b", false), (std::vector<int32_t>{0, 4, 1}));
  auto ws = Tokenizer::from_json(make_json(v, "[]", R"({"type":"WhitespaceSplit"})"));
  EXPECT_EQ(ws.encode("  a \t b ", false), (std::vector<int32_t>{0, 1}));
  auto lower = Tokenizer::from_json(make_json(
      v, "[]", "null",
      R"({"type":"Sequence","normalizers":[{"type":"Strip","strip_left":true,"strip_right":true},{"type":"Lowercase"}]})"));
  EXPECT_EQ(lower.encode("  AB  ", false), (std::vector<int32_t>{0, 1}));
}

TEST(TokenizerComponents, AddedTokenStripAndSingleWord) {
  const std::string v = R"({"a":0,"b":1," ":2,"<x>":3})";
  auto tok = Tokenizer::from_json(make_json(
      v, "[]", "null", "null", "null", "",
      R"([{"id":3,"content":"<x>","special":true,"normalized":false,"lstrip":true,"rstrip":true}])"));
  EXPECT_EQ(tok.encode("a  <x>  b", false), (std::vector<int32_t>{0, 3, 1}));
  auto word = Tokenizer::from_json(make_json(
      v, "[]", "null", "null", "null", "",
      R"([{"id":3,"content":"ab","special":false,"normalized":false,"single_word":true}])"));
  EXPECT_EQ(word.encode("ab a", false), (std::vector<int32_t>{3, 2, 0}));
  EXPECT_EQ(word.encode("aab", false), (std::vector<int32_t>{0, 0, 1}));
}

TEST(TokenizerUnicode, LossyReplacementFollowsMaximalSubparts) {
  EXPECT_EQ(tok::utf8_lossy("\xE4\xB8"), "\xEF\xBF\xBD");
  EXPECT_EQ(tok::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(tok::utf8_lossy("a\xF0\x9F\x98"
                            "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(tok::unicode_normalize("e\xCC\x81 x", tok::NormForm::NFC), "\xC3\xA9 x");
}

// 1 MB of one letter is a single pre-tokenized word: merging must be O(n log n). The bound is
// generous (the real timing is in bench/bench_tokenizer).
TEST(TokenizerSpeed, MegabyteOfOneLetterIsNotQuadratic) {
  for (const char* name : {"qwen3", "llama2"}) {
    const Tokenizer* tok = load_tokenizer(name);
    ASSERT_NE(tok, nullptr);
    std::string text(1000000, 'a');
    auto t0 = std::chrono::steady_clock::now();
    auto ids = tok->encode(text, false);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 5.0) << name;
    EXPECT_GT(ids.size(), 1000u);
    EXPECT_EQ(tok->decode(ids), text);
  }
}

TEST(TokenizerConfig, SpecialTokensAndTemplates) {
  const Tokenizer* qwen = load_tokenizer("qwen3");
  ASSERT_NE(qwen, nullptr);
  EXPECT_EQ(qwen->eos_token(), "<|im_end|>");
  EXPECT_EQ(qwen->eos_id(), 151645);
  EXPECT_FALSE(qwen->bos_id().has_value());
  EXPECT_EQ(qwen->pad_id(), 151643);
  EXPECT_EQ(qwen->token_id("<|im_start|>"), 151644);
  EXPECT_EQ(qwen->token_text(151644), "<|im_start|>");
  EXPECT_EQ(qwen->token_id("Hello"), 9707);
  EXPECT_TRUE(qwen->is_special(151645));
  EXPECT_FALSE(qwen->adds_bos());
  EXPECT_NE(qwen->chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_GE(qwen->vocab_size(), 151665);

  const Tokenizer* llama2 = load_tokenizer("llama2");
  ASSERT_NE(llama2, nullptr);
  EXPECT_EQ(llama2->bos_id(), 1);
  EXPECT_TRUE(llama2->adds_bos());
  EXPECT_EQ(llama2->encode("", true), (std::vector<int32_t>{1}));
  const Tokenizer* deepseek = load_tokenizer("deepseek_v3");
  ASSERT_NE(deepseek, nullptr);
  EXPECT_EQ(deepseek->bos_token(), "<｜begin▁of▁sentence｜>");  // from an AddedToken object
  EXPECT_EQ(deepseek->bos_id(), 0);
}

TEST(TokenizerCli, TokenizeAndDetokenize) {
  auto dir = tokenizer_dir("qwen3");
  if (!std::filesystem::exists(HEARTH_BINARY)) GTEST_SKIP() << HEARTH_BINARY << " not built";
  auto run = [](const std::string& cmd) {
    std::string out;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return out;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
    pclose(p);
    return out;
  };
  std::string bin = HEARTH_BINARY;
  EXPECT_EQ(run(bin + " tokenize -m '" + dir.string() + "' -- 'Hello world!'"), "[9707,1879,0]\n");
  EXPECT_EQ(run(bin + " detokenize -m '" + dir.string() + "' 9707,1879,0"), "Hello world!");
}

}  // namespace
}  // namespace hearth::test
