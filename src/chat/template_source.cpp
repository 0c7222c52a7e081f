// Reads a model folder's chat template and special tokens (see template_source.h).
#include "chat/template_source.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hearth::chat {
namespace {

std::optional<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<std::string> token_text(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

TemplateSource load_template_source(const std::string& model_dir) {
  namespace fs = std::filesystem;
  TemplateSource src;
  fs::path dir(model_dir);
  fs::path config_path = dir / "tokenizer_config.json";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (auto text = read_file(config_path)) {
    try {
      config = nlohmann::ordered_json::parse(*text);
    } catch (const std::exception& e) {
      fail("{}: invalid JSON: {}", config_path.string(), e.what());
    }
    if (!config.is_object()) fail("{}: expected a JSON object", config_path.string());
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (config.contains(key)) {
      if (auto t = token_text(config[key])) src.special_tokens[key] = *t;
    }
  }
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object()) {
    for (auto it = config["extra_special_tokens"].begin();
         it != config["extra_special_tokens"].end(); ++it) {
      if (auto t = token_text(it.value())) src.special_tokens[it.key()] = *t;
    }
  }
  if (auto jinja = read_file(dir / "chat_template.jinja")) {
    src.template_text = *jinja;
    src.origin = (dir / "chat_template.jinja").string();
    return src;
  }
  if (config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    src.origin = config_path.string() + ": chat_template";
    if (ct.is_string()) {
      src.template_text = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const auto& entry : ct) {
        // == rather than value("name", ""), which throws when the name is not a string.
        if (entry.is_object() && entry.contains("name") && entry["name"] == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          src.template_text = entry["template"].get<std::string>();
        }
      }
      if (!src.template_text)
        fail("{}: chat_template list has no entry named \"default\"", config_path.string());
    } else if (!ct.is_null()) {
      fail("{}: chat_template must be a string or a list of {{name, template}}",
           config_path.string());
    }
  }
  return src;
}

}  // namespace hearth::chat
