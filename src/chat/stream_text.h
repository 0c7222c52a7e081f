// Small text helpers shared by the streaming output parsers (reasoning_parser, tool_parser).
#pragma once
#include <algorithm>
#include <string_view>

namespace hearth::chat {

// Length of the longest suffix of `s` that is a proper prefix of `tag`: text a stream must hold
// back because the next chunk may complete the tag.
inline size_t partial_suffix(std::string_view s, std::string_view tag) {
  for (size_t len = std::min(s.size(), tag.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

}  // namespace hearth::chat
