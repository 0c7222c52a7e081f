// The per-token SSE path writes exactly the bytes the JSON library would: strings escaped the
// same way (control characters, quotes, non-ASCII, invalid UTF-8), and a pre-rendered chunk
// equal to dumping the whole chunk with the text in it, framed as an SSE event or an NDJSON line.
#include "server/sse.h"

#include <gtest/gtest.h>

#include "server/http_util.h"

namespace hearth::server {
namespace {

using nlohmann::json;

TEST(Sse, JsonStringsMatchTheLibrary) {
  std::vector<std::string> texts = {"",
                                    "plain",
                                    "quote \" and \\ backslash",
                                    "tab\tnl\ncr\r",
                                    "\b\f\x01\x1f\x7f",
                                    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
                                    "</script>"};
  // Invalid UTF-8: a lone continuation, a cut sequence, an overlong, a surrogate, past U+10FFFF.
  for (std::string bad : {"\x80", "ab\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80"})
    texts.push_back("x" + bad + "y");
  for (int c = 0; c < 256; ++c) texts.push_back(std::string(1, char(c)));
  for (const auto& t : texts) {
    std::string out = "prefix:";
    append_json_string(out, t);
    EXPECT_EQ(out, "prefix:" + dump_json(json(t)))
        << json(t).dump(-1, ' ', true, json::error_handler_t::replace);
  }
}

TEST(Sse, TextChunkEqualsTheDumpedChunk) {
  auto body = [](const std::string& text) {
    return json{
        {"id", "cmpl-1"},
        {"choices", json::array({{{"index", 0}, {"text", text}, {"finish_reason", nullptr}}})},
        {"usage", nullptr}};
  };
  const SseTextChunk chunk(body(std::string(SseTextChunk::kSlot)));
  std::string out;
  for (const std::string text : {"Hello", " wor\"ld\n", ""}) {
    out.clear();
    chunk.append(out, text);
    EXPECT_EQ(out, sse_data(body(text)));
  }
  EXPECT_THROW(SseTextChunk(json{{"no", "slot"}}), hearth::Error);
}

// NDJSON framing (the Ollama API): the dumped object and a newline, nothing else.
TEST(Sse, TextChunkFramedAsNdjsonLine) {
  auto body = [](const std::string& text) {
    return json{{"model", "m"}, {"message", {{"role", "assistant"}, {"content", text}}}};
  };
  const SseTextChunk line(body(std::string(SseTextChunk::kSlot)), "", "\n");
  std::string out;
  line.append(out, "a \"b\"\n");
  EXPECT_EQ(out, dump_json(body("a \"b\"\n")) + "\n");
}

}  // namespace
}  // namespace hearth::server
