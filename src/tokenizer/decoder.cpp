// Decoder implementations, one per HF decoder type. ByteLevel maps each token's chars back to
// bytes (tokens with chars outside the table pass through as UTF-8) and replaces invalid UTF-8
// with U+FFFD over the whole concatenation; ByteFallback turns runs of <0xXX> tokens into text,
// one U+FFFD per byte when the run is not valid UTF-8.
#include "tokenizer/decoder.h"

#include "tokenizer/bpe.h"
#include "tokenizer/json_util.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens)
      if (!byte_level_decode(t, bytes)) bytes += t;
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepend)
      : replacement_(std::move(replacement)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (!replacement_.empty() && t.compare(k, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepend_)) out += ' ';
          k += replacement_.size();
        } else {
          out += t[k++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepend_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = regex_replace_all(*re_, t, content_);
  }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

class ByteFallbackDecoder final : public Decoder {
 public:
  bool groups_byte_tokens() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (utf8_is_valid(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
    };
    for (auto& t : tokens) {
      int b = parse_byte_token(t);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<size_t> starts;  // byte offset of each char
      for (size_t i = 0; i < t.size();) {
        starts.push_back(i);
        utf8_next(t, i);
      }
      size_t n = starts.size();
      auto char_at = [&](size_t k) {
        size_t i = starts[k];
        return utf8_next(t, i);
      };
      size_t start_cut = 0;
      for (size_t k = 0; k < start_ && k < n; ++k) {
        if (char_at(k) != content_) break;
        start_cut = k + 1;
      }
      size_t stop_cut = n;
      for (size_t k = 0; k < stop_ && k < n; ++k) {
        size_t index = n - k - 1;
        if (char_at(index) != content_) break;
        stop_cut = index;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      size_t b = start_cut < n ? starts[start_cut] : t.size();
      size_t e = stop_cut < n ? starts[stop_cut] : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> items)
      : items_(std::move(items)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }
  bool groups_byte_tokens() const override {
    for (const auto& d : items_)
      if (d->groups_byte_tokens()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

}  // namespace

bool is_byte_token(std::string_view token) { return parse_byte_token(token) >= 0; }

bool is_plain_byte_level(const Decoder* d) {
  return d && dynamic_cast<const ByteLevelDecoder*>(d) != nullptr;
}

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  std::string type = json_type(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    std::string scheme = json_string_or(j, "prepend_scheme", "always", where);
    bool prepend = scheme != "never" && json_bool_or(j, "add_prefix_space", true, where);
    return std::make_unique<MetaspaceDecoder>(
        json_string_or(j, "replacement", "\xE2\x96\x81", where), prepend);
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(
        make_pattern(json_field(j, "pattern", where), where + ".pattern"),
        json_string(j, "content", where));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    std::string content = json_string_or(j, "content", " ", where);
    size_t i = 0;
    char32_t c = content.empty() ? U' ' : utf8_next(content, i);
    int64_t start = json_int_or(j, "start", 0, where), stop = json_int_or(j, "stop", 0, where);
    if (start < 0 || stop < 0) fail("{}: start/stop must be non-negative", where);
    return std::make_unique<StripDecoder>(c, static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Sequence") {
    const auto& arr = json_array(j, "decoders", where);
    std::vector<std::unique_ptr<Decoder>> items;
    for (size_t i = 0; i < arr.size(); ++i) {
      auto d = make_decoder(arr[i], fmt::format("{}.decoders[{}]", where, i));
      if (d) items.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(items));
  }
  fail("{}.type: unsupported decoder {:?}", where, type);
}

}  // namespace hearth::tok
