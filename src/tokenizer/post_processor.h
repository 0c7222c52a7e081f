// Post-processors of tokenizer.json for single sequences: TemplateProcessing (special tokens
// around $A), RobertaProcessing/BertProcessing (cls $A sep), ByteLevel (offsets only: no-op for
// ids) and Sequence. Applied only when encode() is asked to add special tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hearth::tok {

class PostProcessor {
 public:
  // The ids placed before and after the sequence.
  std::vector<int32_t> prefix;
  std::vector<int32_t> suffix;
  void apply(std::vector<int32_t>& ids) const {
    if (!prefix.empty()) ids.insert(ids.begin(), prefix.begin(), prefix.end());
    ids.insert(ids.end(), suffix.begin(), suffix.end());
  }
};

// `j` is the "post_processor" value (may be null: nothing added).
PostProcessor make_post_processor(const nlohmann::json& j, const std::string& where);

}  // namespace hearth::tok
