// Split/Replace patterns: {"String": s} is matched literally, {"Regex": r} as an Oniguruma regex.
#include "tokenizer/pattern.h"

#include "tokenizer/json_util.h"
#include "tokenizer/scratch.h"

namespace hearth::tok {

std::unique_ptr<Regex> make_pattern(const nlohmann::json& j, const std::string& where) {
  if (j.is_object() && j.contains("String")) {
    const auto& s = j["String"];
    if (!s.is_string()) fail("{}.String: expected a string", where);
    return std::make_unique<Regex>(Regex::literal(s.get<std::string>(), where));
  }
  if (j.is_object() && j.contains("Regex")) {
    const auto& r = j["Regex"];
    if (!r.is_string()) fail("{}.Regex: expected a string", where);
    return std::make_unique<Regex>(r.get<std::string>(), where);
  }
  if (j.is_string()) return std::make_unique<Regex>(Regex::literal(j.get<std::string>(), where));
  fail("{}: expected {{\"String\": ...}} or {{\"Regex\": ...}}", where);
}

std::string regex_replace_all(const Regex& re, std::string_view s, std::string_view content) {
  thread_local std::vector<Span> spans;
  spans.clear();
  re.find_all(s, spans);
  if (spans.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t prev = 0;
  for (const auto& m : spans) {
    out.append(s.substr(prev, m.begin - prev));
    out.append(content);
    prev = m.end;
  }
  out.append(s.substr(prev));
  release_if_large(spans);
  return out;
}

}  // namespace hearth::tok
