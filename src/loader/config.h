// ModelConfig: config.json (and generation_config.json) of a checkpoint with typed, checked access.
// Multimodal wrappers (gemma3, qwen3_5, ...) nest the language model under "text_config"; the
// accessors read that text part, with the top-level keys it lacks (e.g. tie_word_embeddings)
// merged in, so model code never cares whether it was wrapped. Every accessor failure names the
// file and the field (and for a value out of range, the value and the bounds). A null value
// counts as absent.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hearth {

class ModelConfig {
 public:
  // Reads dir/config.json (required, must be an object with a model_type) and
  // dir/generation_config.json (optional). Throws hearth::Error naming the path.
  static ModelConfig load(const std::filesystem::path& dir);
  // From already-parsed JSON; `source` names it in error messages. `generation` may be null.
  static ModelConfig from_json(const nlohmann::json& config,
                               const nlohmann::json& generation = nlohmann::json::object(),
                               const std::string& source = "config.json");

  // The text model's model_type (text_config.model_type, else the top-level one).
  const std::string& model_type() const { return model_type_; }
  // The top-level model_type; equal to model_type() when the config is not a wrapper.
  const std::string& wrapper_model_type() const { return wrapper_model_type_; }
  bool is_wrapped() const { return wrapped_; }

  bool has(const std::string& key) const;  // present and not null
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // integers are accepted
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  // Default when absent or null; a value of the wrong type is still an error.
  int64_t get_int_or(const std::string& key, int64_t fallback) const;
  double get_float_or(const std::string& key, double fallback) const;
  bool get_bool_or(const std::string& key, bool fallback) const;
  std::string get_string_or(const std::string& key, const std::string& fallback) const;
  // Integers that must lie in [lo, hi]: out of range fails naming the field, the value, the
  // bounds and `why` (where the bound comes from; may be null). The fallback is not checked.
  int64_t get_int_in(const std::string& key, int64_t lo, int64_t hi,
                     const char* why = nullptr) const;
  int64_t get_int_in_or(const std::string& key, int64_t fallback, int64_t lo, int64_t hi,
                        const char* why = nullptr) const;
  // Numbers that must be finite and lie in [lo, hi] ((lo, hi] when lo_open).
  double get_float_in_or(const std::string& key, double fallback, double lo, double hi,
                         bool lo_open = false) const;

  // "text_config.key" when the key came from text_config, else "key": how messages name it.
  std::string field_name(const std::string& key) const;
  // Fails naming the file, `field` (a path such as "rope_parameters.factor" or
  // "layer_types[3]"), its value and what was `expected` instead.
  [[noreturn]] void fail_field(const std::string& field, const nlohmann::json& value,
                               const std::string& expected) const;

  // The (merged) text config.
  const nlohmann::json& raw() const { return text_; }
  // config.json exactly as read.
  const nlohmann::json& full() const { return full_; }
  // generation_config.json, or an empty object.
  const nlohmann::json& generation() const { return generation_; }
  // Union of eos_token_id from generation_config, then the text config, then the top level
  // (each an int or a list; nulls ignored), in order of first appearance, without repeats.
  // Ids are token ids: an id outside [0, 2^31 - 1] is an error naming the file.
  std::vector<int64_t> eos_token_ids() const;
  // The config.json path (or the `source` given to from_json), for messages.
  const std::string& source() const { return source_; }
  // The generation_config.json path, for messages.
  const std::string& generation_source() const { return generation_source_; }

 private:
  // The value of `key` or nullptr when absent or null.
  const nlohmann::json* lookup(const std::string& key) const;
  [[noreturn]] void fail_type(const std::string& key, const char* expected) const;

  nlohmann::json full_;
  nlohmann::json text_;
  nlohmann::json generation_ = nlohmann::json::object();
  std::string model_type_, wrapper_model_type_;
  bool wrapped_ = false;
  std::string source_;
  std::string generation_source_;
};

}  // namespace hearth
