// JSON from outside the process (request bodies, strings inside them, model output) parsed with a
// nesting limit. nlohmann's parser is iterative, but dump(), our converters and the chat template
// walk a document recursively, so a 40 KB body nested 20,000 deep would overflow the stack there.
// Refusing such documents at the parse keeps every later walk bounded.
#pragma once
#include <nlohmann/json.hpp>
#include <string_view>

namespace hearth {

// Deeper than any real schema, message or tool call (JSON Schema documents seen in tool lists
// nest well under 32), shallow enough that each recursive walk uses a few hundred KB of stack.
inline constexpr int kMaxJsonDepth = 128;

enum class JsonParseStatus { Ok, Invalid, TooDeep };

// Parses `text` into `out`; on Invalid or TooDeep `out` is left discarded. Never throws.
template <class Json>
JsonParseStatus parse_json_bounded(std::string_view text, Json& out,
                                   int max_depth = kMaxJsonDepth) {
  struct TooDeep {};
  auto limit = [max_depth](int depth, typename Json::parse_event_t event, Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw TooDeep{};  // stop at once rather than parse the rest of a hostile document
    return true;
  };
  try {
    out = Json::parse(text, limit, false);
  } catch (const TooDeep&) {
    out = Json(Json::value_t::discarded);
    return JsonParseStatus::TooDeep;
  }
  return out.is_discarded() ? JsonParseStatus::Invalid : JsonParseStatus::Ok;
}

// For sources where a document that is too deep is treated like one that is not JSON.
template <class Json>
Json parse_json_or_discarded(std::string_view text, int max_depth = kMaxJsonDepth) {
  Json out;
  parse_json_bounded(text, out, max_depth);
  return out;
}

}  // namespace hearth
