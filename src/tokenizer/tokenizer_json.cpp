// SAX handler: DOM building through a stack of json pointers (array elements are only appended
// after the element before them is complete, so pointers stay valid), with two special modes for
// model.vocab (key → integer id) and model.merges ("a b" strings or ["a", "b"] pairs).
#include "tokenizer/tokenizer_json.h"

#include "core/error.h"

namespace hearth::tok {

namespace {
using json = nlohmann::json;

class Handler final : public nlohmann::json_sax<json> {
 public:
  Handler(TokenizerJson& out, std::string file) : out_(out), file_(std::move(file)) {}

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::Vocab) return vocab_id(v);
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::Vocab) return vocab_id(v > static_cast<uint64_t>(INT32_MAX) ? -1 : static_cast<int64_t>(v));
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t&) override { return value(json(v)); }
  bool binary(binary_t&) override { return true; }
  bool string(string_t& v) override {
    if (mode_ == Mode::Merges) {
      size_t sp = v.find(' ');
      if (sp == std::string::npos || v.find(' ', sp + 1) != std::string::npos)
        fail("{}: model.merges[{}]: expected two tokens separated by one space, got {:?}", file_, out_.merges.size(), v);
      out_.merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
      return true;
    }
    if (mode_ == Mode::MergePair) {
      if (pair_count_ >= 2) fail("{}: model.merges[{}]: expected two tokens", file_, out_.merges.size());
      (pair_count_ == 0 ? pair_.first : pair_.second) = std::move(v);
      ++pair_count_;
      return true;
    }
    if (mode_ == Mode::Vocab) fail("{}: model.vocab[{:?}]: expected an integer id", file_, key_);
    return value(json(std::move(v)));
  }
  bool start_object(std::size_t) override {
    if (mode_ == Mode::Merges || mode_ == Mode::MergePair)
      fail("{}: model.merges[{}]: expected two tokens", file_, out_.merges.size());
    if (mode_ == Mode::Vocab) fail("{}: model.vocab[{:?}]: expected an integer id", file_, key_);
    if (entering("vocab")) {
      mode_ = Mode::Vocab;
      out_.has_vocab = true;
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (mode_ == Mode::Vocab) {
      mode_ = Mode::Dom;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_count_ = 0;
      return true;
    }
    if (mode_ == Mode::MergePair) fail("{}: model.merges[{}]: expected two tokens", file_, out_.merges.size());
    if (mode_ == Mode::Vocab) fail("{}: model.vocab[{:?}]: expected an integer id", file_, key_);
    if (entering("merges")) {
      mode_ = Mode::Merges;
      out_.has_merges = true;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::MergePair) {
      if (pair_count_ != 2) fail("{}: model.merges[{}]: expected two tokens", file_, out_.merges.size());
      out_.merges.emplace_back(std::move(pair_.first), std::move(pair_.second));
      mode_ = Mode::Merges;
      return true;
    }
    if (mode_ == Mode::Merges) {
      mode_ = Mode::Dom;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    fail("{}: invalid JSON at byte {}: {}", file_, position, e.what());
  }

 private:
  enum class Mode { Dom, Vocab, Merges, MergePair };

  // True when the value about to start is root.model.<name>.
  bool entering(const char* name) const {
    return stack_.size() == 2 && stack_[1].is_object_in_root_model && stack_.back().node->is_object() && key_ == name;
  }
  bool vocab_id(int64_t v) {
    if (v < 0 || v > INT32_MAX) fail("{}: model.vocab[{:?}]: id {} out of range", file_, key_, v);
    out_.vocab.emplace_back(std::move(key_), static_cast<int32_t>(v));
    return true;
  }
  json* place(json&& v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json* parent = stack_.back().node;
    if (parent->is_object()) {
      json& slot = (*parent)[key_];
      slot = std::move(v);
      return &slot;
    }
    parent->push_back(std::move(v));
    return &parent->back();
  }
  bool value(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    bool in_model = stack_.size() == 1 && stack_[0].node->is_object() && key_ == "model";
    json* node = place(std::move(v));
    stack_.push_back({node, in_model});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  struct Frame {
    json* node;
    bool is_object_in_root_model;
  };
  TokenizerJson& out_;
  std::string file_;
  std::vector<Frame> stack_;
  std::string key_;
  Mode mode_ = Mode::Dom;
  std::pair<std::string, std::string> pair_;
  int pair_count_ = 0;
};
}  // namespace

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& file) {
  TokenizerJson out;
  out.vocab.reserve(text.size() / 40);
  out.merges.reserve(text.size() / 40);
  Handler handler(out, file);
  if (!json::sax_parse(text.begin(), text.end(), &handler)) fail("{}: invalid JSON", file);
  if (!out.doc.is_object()) fail("{}: expected a JSON object at the top level", file);
  return out;
}

}  // namespace hearth::tok
