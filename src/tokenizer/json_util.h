// Typed field access for tokenizer.json / tokenizer_config.json values with errors that name
// the file and JSON path ("tokenizer.json: model.merges[12]: expected two tokens").
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace hearth::tok {

inline const nlohmann::json& json_field(const nlohmann::json& j, const char* key,
                                        const std::string& where) {
  if (!j.is_object()) fail("{}: expected an object", where);
  auto it = j.find(key);
  if (it == j.end()) fail("{}.{}: missing", where, key);
  return *it;
}

inline std::string json_string(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = json_field(j, key, where);
  if (!v.is_string()) fail("{}.{}: expected a string", where, key);
  return v.get<std::string>();
}

inline std::string json_string_or(const nlohmann::json& j, const char* key,
                                  const std::string& fallback, const std::string& where) {
  if (!j.is_object()) fail("{}: expected an object", where);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) fail("{}.{}: expected a string", where, key);
  return it->get<std::string>();
}

inline bool json_bool_or(const nlohmann::json& j, const char* key, bool fallback,
                         const std::string& where) {
  if (!j.is_object()) fail("{}: expected an object", where);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail("{}.{}: expected true or false", where, key);
  return it->get<bool>();
}

inline int64_t json_int_or(const nlohmann::json& j, const char* key, int64_t fallback,
                           const std::string& where) {
  if (!j.is_object()) fail("{}: expected an object", where);
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) fail("{}.{}: expected an integer", where, key);
  return it->get<int64_t>();
}

inline const nlohmann::json& json_array(const nlohmann::json& j, const char* key,
                                        const std::string& where) {
  const auto& v = json_field(j, key, where);
  if (!v.is_array()) fail("{}.{}: expected an array", where, key);
  return v;
}

inline std::string json_type(const nlohmann::json& j, const std::string& where) {
  return json_string(j, "type", where);
}

}  // namespace hearth::tok
