// Reduces every supported post-processor to "prefix ids + sequence + suffix ids" for a single
// sequence (pair templates are not needed by an LLM engine). A Sequence applies its processors
// in order, so later ones wrap earlier ones.
#include "tokenizer/post_processor.h"

#include "tokenizer/json_util.h"

namespace hearth::tok {

namespace {
void add_processor(PostProcessor& pp, const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return;
  std::string type = json_type(j, where);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const auto& arr = json_array(j, "processors", where);
    for (size_t i = 0; i < arr.size(); ++i)
      add_processor(pp, arr[i], fmt::format("{}.processors[{}]", where, i));
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto id_of = [&](const char* key) -> int32_t {
      const auto& v = json_field(j, key, where);
      if (!v.is_array() || v.size() != 2 || !v[1].is_number_integer())
        fail("{}.{}: expected [token, id]", where, key);
      return v[1].get<int32_t>();
    };
    std::vector<int32_t> pre{id_of("cls")};
    pre.insert(pre.end(), pp.prefix.begin(), pp.prefix.end());
    pp.prefix = std::move(pre);
    pp.suffix.push_back(id_of("sep"));
    return;
  }
  if (type == "TemplateProcessing") {
    const auto& single = json_array(j, "single", where);
    const auto& specials = json_field(j, "special_tokens", where);
    std::vector<int32_t> before, after;
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      std::string w = fmt::format("{}.single[{}]", where, i);
      const auto& piece = single[i];
      if (piece.is_object() && piece.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      if (!piece.is_object() || !piece.contains("SpecialToken"))
        fail("{}: expected SpecialToken or Sequence", w);
      std::string name = json_string(piece["SpecialToken"], "id", w + ".SpecialToken");
      auto it = specials.find(name);
      if (it == specials.end()) fail("{}.special_tokens: missing {:?}", where, name);
      // A copy, not a reference: GCC 13 cannot prove the temporary-free lifetime
      // (-Wdangling-reference).
      const auto ids = json_array(*it, "ids", fmt::format("{}.special_tokens[{:?}]", where, name));
      for (const auto& id : ids) {
        if (!id.is_number_integer())
          fail("{}.special_tokens[{:?}].ids: expected integers", where, name);
        (seen_sequence ? after : before).push_back(id.get<int32_t>());
      }
    }
    if (!seen_sequence) fail("{}.single: no Sequence piece", where);
    before.insert(before.end(), pp.prefix.begin(), pp.prefix.end());
    pp.prefix = std::move(before);
    pp.suffix.insert(pp.suffix.end(), after.begin(), after.end());
    return;
  }
  fail("{}.type: unsupported post-processor {:?}", where, type);
}
}  // namespace

PostProcessor make_post_processor(const nlohmann::json& j, const std::string& where) {
  PostProcessor pp;
  add_processor(pp, j, where);
  return pp;
}

}  // namespace hearth::tok
