// Normalizers of tokenizer.json (NFC, NFD, NFKC, NFKD, Lowercase, Strip, Prepend, Replace,
// BertNormalizer, Sequence), built from their JSON and applied to whole pieces of text, as HF
// tokenizers' NormalizedString does (offsets are not tracked: hearth needs ids only).
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace hearth::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string apply(std::string s) const = 0;
};

// `j` is the "normalizer" value (may be null → nullptr); `where` names it in errors.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);

}  // namespace hearth::tok
