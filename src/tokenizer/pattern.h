// The "pattern" field shared by Split, Replace (normalizer and decoder): {"String": s} or
// {"Regex": r}. Both compile to a PCRE2 regex, as HF escapes String patterns into a regex.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "tokenizer/regex.h"

namespace hearth::tok {

std::unique_ptr<Regex> make_pattern(const nlohmann::json& j, const std::string& where);

// Replaces every match of `re` in `s` with `content`.
std::string regex_replace_all(const Regex& re, std::string_view s, std::string_view content);

}  // namespace hearth::tok
