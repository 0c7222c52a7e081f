// Shared helpers for the chat-template tests: the oracle file tests/data/chat/reference.json
// (made by tools/reference/make_template_reference.py with transformers 5.17 / jinja2) and the
// frozen clock it was rendered under.
#pragma once
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace hearth::chat::testing {

inline const nlohmann::ordered_json& reference() {
  static const nlohmann::ordered_json ref = [] {
    std::ifstream in(std::string(HEARTH_TEST_DATA) + "/chat/reference.json", std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return nlohmann::ordered_json::parse(ss.str());
  }();
  return ref;
}

// The reference froze datetime.now() at this local time (generator.frozen_now).
inline std::time_t frozen_now() {
  std::tm tm{};
  tm.tm_year = 2024 - 1900;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 9;
  tm.tm_min = 5;
  tm.tm_sec = 7;
  tm.tm_isdst = -1;
  return std::mktime(&tm);
}

// Python exception types that mean "the template called raise_exception".
inline bool is_template_raise(const nlohmann::ordered_json& error) {
  return error.value("type", "") == "TemplateError";
}

}  // namespace hearth::chat::testing
