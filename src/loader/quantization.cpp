#include "loader/quantization.h"

#include "core/error.h"
#include "quant/affine.h"

namespace hearth {

namespace {

int int_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end()) fail("{}: '{}' is missing", where, key);
  if (!it->is_number_integer()) fail("{}: '{}' must be an integer, got {}", where, key, it->dump());
  const int64_t v = it->get<int64_t>();
  if (v < 0 || v > 4096) fail("{}: '{}' is {}, out of range", where, key, v);
  return int(v);
}

ModuleQuantization parse_entry(const nlohmann::json& obj, const std::string& where) {
  ModuleQuantization q;
  const std::string mode = obj.contains("mode") && obj["mode"].is_string()
                               ? obj["mode"].get<std::string>()
                               : std::string("affine");
  if (obj.contains("mode") && !obj["mode"].is_string())
    fail("{}: 'mode' must be a string, got {}", where, obj["mode"].dump());
  q.bits = int_field(obj, "bits", where);
  q.group_size = int_field(obj, "group_size", where);
  if (mode == "affine") {
    q.format = WeightFormat::Affine;
    if (!quant::affine_bits_supported(q.bits))
      fail("{}: affine bits {} is not supported (2, 3, 4, 5, 6 or 8)", where, q.bits);
    if (!quant::affine_group_size_supported(q.group_size))
      fail("{}: affine group_size {} is not supported (32, 64 or 128)", where, q.group_size);
    return q;
  }
  if (mode == "trellis") {
    q.format = WeightFormat::Trellis;
    if (q.bits < 2 || q.bits > 4)
      fail("{}: trellis bits {} is not supported (2, 3 or 4)", where, q.bits);
    if (q.group_size != 256)
      fail("{}: trellis group_size must be 256, got {}", where, q.group_size);
    auto t = obj.find("trellis");
    if (t == obj.end() || !t->is_object())
      fail("{}: a trellis entry needs a 'trellis' object", where);
    const std::string tw = where + ".trellis";
    if (int_field(*t, "L", tw) != 12) fail("{}: L {} is not supported (12)", tw, (*t)["L"].dump());
    auto code = t->find("code");
    if (code == t->end() || !code->is_string() || code->get<std::string>() != "1mad")
      fail("{}: code {} is not supported (\"1mad\")", tw,
           code == t->end() ? std::string("(missing)") : code->dump());
    q.axis = int_field(*t, "axis", tw);
    if (q.axis != 0 && q.axis != 1) fail("{}: axis must be 0 or 1, got {}", tw, q.axis);
    return q;
  }
  fail("{}: quantization mode '{}' is not supported (affine or trellis)", where, mode);
}

}  // namespace

QuantizationConfig QuantizationConfig::from_json(const nlohmann::json& config,
                                                 const std::string& source) {
  QuantizationConfig out;
  const char* key = config.contains("quantization") ? "quantization" : "quantization_config";
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return out;
  const std::string where = source + ": " + key;
  if (!it->is_object()) fail("{} must be an object, got {}", where, it->dump());
  if (it->contains("quant_method"))
    fail("{}: quant_method {} is not supported; hearth reads MLX affine and trellis checkpoints",
         where, (*it)["quant_method"].dump());
  if (it->contains("bits") || it->contains("group_size")) out.default_ = parse_entry(*it, where);
  for (const auto& [name, value] : it->items()) {
    if (name == "bits" || name == "group_size" || name == "mode" || name == "trellis") continue;
    const std::string entry_where = where + "." + name;
    if (value.is_boolean()) {
      if (value.get<bool>())
        fail("{}: true is not a quantization (an object or false)", entry_where);
      out.overrides_[name] = std::nullopt;
    } else if (value.is_object()) {
      out.overrides_[name] = parse_entry(value, entry_where);
    } else {
      fail("{} must be an object or false, got {}", entry_where, value.dump());
    }
  }
  return out;
}

std::optional<ModuleQuantization> QuantizationConfig::for_module(const std::string& path) const {
  auto it = overrides_.find(path);
  if (it != overrides_.end()) return it->second;
  return default_;
}

void QuantizationConfig::rename_module(const std::string& from, const std::string& to) {
  auto node = overrides_.extract(from);
  if (node.empty()) return;
  node.key() = to;
  overrides_.insert(std::move(node));
}

}  // namespace hearth
