// ModelConfig: reading, text_config selection and typed field access with errors that name the
// file and field. Integral floats (e.g. 131072.0) are accepted as ints because some exporters
// write every number as a float. Files are parsed with the nesting limit of core/json_bounded.h:
// copying, merging and printing a document all recurse over it.
#include "loader/config.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/json_bounded.h"

namespace hearth {

using json = nlohmann::json;

namespace {

// Parses a JSON file; `required` = false returns null when the file does not exist.
json read_json_file(const std::filesystem::path& path, bool required) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (required) fail("{} not found", path.string());
    return nullptr;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open {}", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  json out;
  switch (parse_json_bounded(text, out)) {
    case JsonParseStatus::Ok:
      return out;
    case JsonParseStatus::TooDeep:
      fail("{}: JSON nested deeper than {} levels", path.string(), kMaxJsonDepth);
    case JsonParseStatus::Invalid:
      break;
  }
  try {
    out = json::parse(text);  // for the parser's message; the document is known to be shallow
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
  fail("{}: not valid JSON", path.string());
}

// Appends the ids in `value` (int, list of ints, or null) to `out` unless already there.
void add_eos_ids(const json& value, const std::string& where, std::vector<int64_t>& out) {
  auto add_one = [&](const json& v) {
    if (v.is_null()) return;
    if (!v.is_number_integer())
      fail("{}: eos_token_id has a {} where a token id (integer) was expected", where,
           v.type_name());
    // Token ids are int32 everywhere past the config; a larger one would alias another token.
    if ((v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX)) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)))
      fail("{}: eos_token_id {} is not a token id (expected an integer in [0, {}])", where,
           v.dump(), INT32_MAX);
    int64_t id = v.get<int64_t>();
    for (int64_t seen : out)
      if (seen == id) return;
    out.push_back(id);
  };
  if (value.is_array()) {
    for (const json& v : value) add_one(v);
  } else {
    add_one(value);
  }
}

}  // namespace

ModelConfig ModelConfig::load(const std::filesystem::path& dir) {
  const auto config_path = dir / "config.json";
  json config = read_json_file(config_path, true);
  const auto generation_path = dir / "generation_config.json";
  json generation = read_json_file(generation_path, false);
  if (!generation.is_null() && !generation.is_object())
    fail("{}: expected a JSON object, got a {}", generation_path.string(), generation.type_name());
  ModelConfig c = from_json(config, generation, config_path.string());
  c.generation_source_ = generation_path.string();
  return c;
}

ModelConfig ModelConfig::from_json(const json& config, const json& generation,
                                   const std::string& source) {
  ModelConfig c;
  c.source_ = source;
  c.generation_source_ = "generation_config.json";
  if (!config.is_object()) fail("{}: expected a JSON object, got a {}", source, config.type_name());
  c.full_ = config;
  if (generation.is_object()) c.generation_ = generation;

  auto outer_type = config.find("model_type");
  if (outer_type != config.end() && !outer_type->is_null() && !outer_type->is_string())
    fail("{}: field 'model_type' is a {}, expected a string", source, outer_type->type_name());

  auto text = config.find("text_config");
  if (text != config.end() && !text->is_null()) {
    if (!text->is_object())
      fail("{}: field 'text_config' is a {}, expected an object", source, text->type_name());
    c.wrapped_ = true;
    c.text_ = *text;
    // Top-level keys the text part lacks apply to it too (tie_word_embeddings, torch_dtype, ...).
    for (const auto& [key, value] : config.items())
      if (key != "text_config" && !c.text_.contains(key)) c.text_[key] = value;
    auto inner_type = text->find("model_type");
    if (inner_type != text->end() && !inner_type->is_null()) {
      if (!inner_type->is_string())
        fail("{}: field 'text_config.model_type' is a {}, expected a string", source,
             inner_type->type_name());
      c.model_type_ = inner_type->get<std::string>();
    }
  } else {
    c.text_ = config;
  }
  if (outer_type != config.end() && outer_type->is_string())
    c.wrapper_model_type_ = outer_type->get<std::string>();
  if (c.model_type_.empty()) c.model_type_ = c.wrapper_model_type_;
  if (c.wrapper_model_type_.empty()) c.wrapper_model_type_ = c.model_type_;
  if (c.model_type_.empty())
    fail("{}: missing field 'model_type' (cannot tell which architecture this is)", source);
  return c;
}

const json* ModelConfig::lookup(const std::string& key) const {
  auto it = text_.find(key);
  if (it == text_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string ModelConfig::field_name(const std::string& key) const {
  if (wrapped_) {
    const json& inner = full_["text_config"];
    if (inner.contains(key)) return "text_config." + key;
  }
  return key;
}

namespace {

// A value as it reads in the file, cut short: a hostile config can hold megabytes in one field.
std::string preview(const json& v) {
  std::string value = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (value.size() > 80) value = value.substr(0, 77) + "...";
  return value;
}

}  // namespace

void ModelConfig::fail_type(const std::string& key, const char* expected) const {
  const json* v = lookup(key);
  if (!v) fail("{}: missing field '{}'", source_, field_name(key));
  fail("{}: field '{}' is {} ({}), expected {}", source_, field_name(key), v->type_name(),
       preview(*v), expected);
}

void ModelConfig::fail_field(const std::string& field, const json& value,
                             const std::string& expected) const {
  fail("{}: field '{}' is {}, expected {}", source_, field, preview(value), expected);
}

bool ModelConfig::has(const std::string& key) const { return lookup(key) != nullptr; }

int64_t ModelConfig::get_int(const std::string& key) const {
  const json* v = lookup(key);
  if (v && v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
    fail_type(key, "an integer that fits in int64");
  if (v && v->is_number_integer()) return v->get<int64_t>();
  if (v && v->is_number_float()) {
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.0e18) return int64_t(d);
  }
  fail_type(key, "an integer");
}

double ModelConfig::get_float(const std::string& key) const {
  const json* v = lookup(key);
  if (v && v->is_number()) return v->get<double>();
  fail_type(key, "a number");
}

bool ModelConfig::get_bool(const std::string& key) const {
  const json* v = lookup(key);
  if (v && v->is_boolean()) return v->get<bool>();
  fail_type(key, "a boolean");
}

std::string ModelConfig::get_string(const std::string& key) const {
  const json* v = lookup(key);
  if (v && v->is_string()) return v->get<std::string>();
  fail_type(key, "a string");
}

int64_t ModelConfig::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}
double ModelConfig::get_float_or(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}
bool ModelConfig::get_bool_or(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}
std::string ModelConfig::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

int64_t ModelConfig::get_int_in(const std::string& key, int64_t lo, int64_t hi,
                                const char* why) const {
  const int64_t v = get_int(key);
  if (v < lo || v > hi)
    fail_field(field_name(key), *lookup(key),
               fmt::format("an integer in [{}, {}]{}", lo, hi,
                           why ? fmt::format(" ({})", why) : std::string()));
  return v;
}

int64_t ModelConfig::get_int_in_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi,
                                   const char* why) const {
  return has(key) ? get_int_in(key, lo, hi, why) : fallback;
}

double ModelConfig::get_float_in_or(const std::string& key, double fallback, double lo, double hi,
                                    bool lo_open) const {
  if (!has(key)) return fallback;
  const double v = get_float(key);
  // A file cannot hold NaN or infinity (the parser refuses them), a config built in memory can.
  const bool above = lo_open ? v > lo : v >= lo;
  if (!std::isfinite(v) || !above || v > hi)
    fail_field(field_name(key), *lookup(key),
               fmt::format("a finite number in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
  return v;
}

std::vector<int64_t> ModelConfig::eos_token_ids() const {
  std::vector<int64_t> ids;
  if (auto it = generation_.find("eos_token_id"); it != generation_.end())
    add_eos_ids(*it, generation_source_, ids);
  if (auto it = text_.find("eos_token_id"); it != text_.end())
    add_eos_ids(*it, source_ + (wrapped_ ? " (text_config)" : ""), ids);
  if (wrapped_)
    if (auto it = full_.find("eos_token_id"); it != full_.end()) add_eos_ids(*it, source_, ids);
  return ids;
}

}  // namespace hearth
