// Server-sent events on the per-token path, without a JSON tree or a heap allocation per token:
// a chunk whose JSON is fixed but for one string (the text of a delta) is rendered once and
// split around that string; each delta is then prefix + escaped text + suffix appended to a
// reused buffer. The bytes are exactly what dumping the whole chunk would give.
// SseBatch gathers the events made from the deltas that had arrived when the handler woke and
// writes them in one write: a token is never held back waiting for a later one, but N ready
// tokens cost one syscall and one client wake-up instead of N.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/http/message.h"

namespace hearth::server {

// Appends `text` as a JSON string literal, as dump_json() writes it (raw UTF-8, control
// characters escaped; invalid UTF-8 replaced by U+FFFD).
void append_json_string(std::string& out, std::string_view text);

class SseTextChunk {
 public:
  // The placeholder to put where the text goes in `body` (exactly once).
  static constexpr std::string_view kSlot = "\x01hearth-text\x01";
  // `before` and `after` frame each chunk: an SSE event by default, "" and "\n" for NDJSON.
  explicit SseTextChunk(const nlohmann::json& body,
                        std::string_view before = "data: ", std::string_view after = "\n\n");
  SseTextChunk() = default;
  // Appends before + {…text…} + after.
  void append(std::string& out, std::string_view text) const;

 private:
  std::string prefix_, suffix_;
};

class SseBatch {
 public:
  explicit SseBatch(http::BodyWriter& sink) : sink_(&sink) {}
  std::string& buffer() { return buffer_; }
  void add(std::string_view event) { buffer_ += event; }
  // Writes what was added since the last flush; false once any write has failed.
  bool flush();
  bool ok() const { return ok_; }
  // An SSE comment line, flushed: keeps proxies and clients from timing out an idle stream.
  bool keep_alive() {
    add(": keep-alive\n\n");
    return flush();
  }

 private:
  http::BodyWriter* sink_;
  std::string buffer_;  // keeps its capacity between flushes
  bool ok_ = true;
};

}  // namespace hearth::server
