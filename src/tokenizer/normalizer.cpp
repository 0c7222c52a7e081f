// Normalizer implementations. Each mirrors the HF tokenizers normalizer of the same name on the
// text alone (no alignment tracking). Prepend acts only on non-empty text, as in HF.
#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

namespace {

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormForm form) : form_(form) {}
  std::string apply(std::string s) const override { return unicode_normalize(s, form_); }

 private:
  NormForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  std::string apply(std::string s) const override { return unicode_lowercase(s); }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string apply(std::string s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t i = b;
        if (!is_whitespace(utf8_next(s, i))) break;
        b = i;
      }
    }
    if (right_) {
      while (e > b) {
        size_t k = e - 1;
        while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        size_t i = k;
        if (!is_whitespace(utf8_next(s, i))) break;
        e = k;
      }
    }
    return s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  std::string apply(std::string s) const override { return s.empty() ? s : prepend_ + s; }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  std::string apply(std::string s) const override { return regex_replace_all(*re_, s, content_); }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

// BERT's normalizer: clean control chars and map whitespace to ' ', pad CJK ideographs with
// spaces, optionally strip accents (NFD then drop Mn) and lowercase.
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip_accents, bool lowercase)
      : clean_(clean), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}
  std::string apply(std::string s) const override;

 private:
  bool clean_, chinese_, strip_accents_, lowercase_;
};

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::string BertNormalizer::apply(std::string s) const {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    char32_t c = utf8_next(s, i);
    if (clean_) {
      bool control = c != '\t' && c != '\n' && c != '\r' && (c < 0x20 || (c >= 0x7F && c < 0xA0));
      if (c == 0 || c == 0xFFFD || control) continue;
      if (is_whitespace(c)) c = ' ';
    }
    if (chinese_ && is_cjk(c)) {
      out += ' ';
      utf8_append(out, c);
      out += ' ';
    } else {
      utf8_append(out, c);
    }
  }
  if (strip_accents_) {
    std::string d = unicode_normalize(out, NormForm::NFD), kept;
    size_t k = 0;
    while (k < d.size()) {
      size_t start = k;
      char32_t c = utf8_next(d, k);
      if (c >= 0x300 && c <= 0x36F) continue;  // combining diacritical marks
      kept.append(d, start, k - start);
    }
    out = std::move(kept);
  }
  if (lowercase_) out = unicode_lowercase(out);
  return out;
}

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> items)
      : items_(std::move(items)) {}
  std::string apply(std::string s) const override {
    for (const auto& n : items_) s = n->apply(std::move(s));
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = json_type(j, where);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormForm::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormForm::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormForm::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormForm::NFKD);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(json_bool_or(j, "strip_left", true, where),
                                             json_bool_or(j, "strip_right", true, where));
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(json_string(j, "prepend", where));
  if (type == "Replace")
    return std::make_unique<ReplaceNormalizer>(
        make_pattern(json_field(j, "pattern", where), where + ".pattern"),
        json_string(j, "content", where));
  if (type == "BertNormalizer") {
    bool lowercase = json_bool_or(j, "lowercase", true, where);
    auto it = j.find("strip_accents");
    bool strip = (it == j.end() || it->is_null()) ? lowercase : it->get<bool>();
    return std::make_unique<BertNormalizer>(json_bool_or(j, "clean_text", true, where),
                                            json_bool_or(j, "handle_chinese_chars", true, where),
                                            strip, lowercase);
  }
  if (type == "Sequence") {
    const auto& arr = json_array(j, "normalizers", where);
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t i = 0; i < arr.size(); ++i) {
      auto n = make_normalizer(arr[i], fmt::format("{}.normalizers[{}]", where, i));
      if (n) items.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(items));
  }
  fail("{}.type: unsupported normalizer {:?}", where, type);
}

}  // namespace hearth::tok
