#include "server/sse.h"

#include "core/error.h"
#include "server/http_util.h"

namespace hearth::server {

namespace {

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF), as nlohmann's
// serializer decodes it.
bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return false;
    for (size_t k = 2; k < len; ++k)
      if (!is_continuation(p[i + k])) return false;
    i += len;
  }
  return true;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  if (!valid_utf8(text)) {  // rare (a model can emit any bytes): let the library replace them
    out += dump_json(nlohmann::json(std::string(text)));
    return;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          out.append(esc, sizeof esc);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

SseTextChunk::SseTextChunk(const nlohmann::json& body, std::string_view before,
                           std::string_view after) {
  const std::string dumped = dump_json(body);
  const std::string slot = dump_json(nlohmann::json(std::string(kSlot)));
  const size_t at = dumped.find(slot);
  if (at == std::string::npos || dumped.find(slot, at + 1) != std::string::npos)
    fail("SseTextChunk: the body must hold the text slot exactly once");
  prefix_ = std::string(before) + dumped.substr(0, at);
  suffix_ = dumped.substr(at + slot.size()) + std::string(after);
}

void SseTextChunk::append(std::string& out, std::string_view text) const {
  out += prefix_;
  append_json_string(out, text);
  out += suffix_;
}

bool SseBatch::flush() {
  if (!buffer_.empty()) {
    ok_ = ok_ && sink_->write(buffer_);
    buffer_.clear();
  }
  return ok_;
}

}  // namespace hearth::server
