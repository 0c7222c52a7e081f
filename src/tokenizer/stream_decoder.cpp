// Streaming detokenizer (the scheme of text-generation-inference): decode a short window of ids
// that ends at the newest id and emit what it adds beyond the window's already-emitted part.
// Keeping one emitted chunk of context makes position-dependent decoders (Strip of the leading
// space, Metaspace's first-token rule) behave as in a full decode; text still ending in U+FFFD
// (an incomplete byte sequence) is held back until more ids or flush(), and so is a run of
// <0xXX> byte tokens under a ByteFallback decoder, which decodes the run as a whole (one U+FFFD
// per byte when it is not valid UTF-8), until a token that ends the run.
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace hearth {

namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// Whether decode(ids) ends inside a run of byte tokens, whose text a later id can still change.
// Ids decode() drops (unknown ones, special ones when skipped) do not end a run.
bool ends_in_byte_run(const Tokenizer::Impl& im, const std::vector<int32_t>& ids,
                      bool skip_special) {
  if (!im.decoder_groups_byte_tokens) return false;
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const int32_t id = *it;
    if (id < 0 || size_t(id) >= im.id_kind.size()) continue;
    const uint8_t kind = im.id_kind[size_t(id)];
    if (kind == Tokenizer::Impl::kNone || (skip_special && kind == Tokenizer::Impl::kSpecial))
      continue;
    return tok::is_byte_token(im.id_text[size_t(id)]);
  }
  return false;
}
}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  if (ends_in_byte_run(*tokenizer_.impl_, ids_, skip_special_)) return {};
  std::span<const int32_t> all(ids_);
  std::string prefix_text = tokenizer_.decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  std::string new_text = tokenizer_.decode(all.subspan(prefix_), skip_special_);
  if (new_text.size() > prefix_text.size() && !ends_with_replacement(new_text) &&
      new_text.compare(0, prefix_text.size(), prefix_text) == 0) {
    std::string out = new_text.substr(prefix_text.size());
    prefix_ = read_;
    read_ = ids_.size();
    // Drop ids that no longer serve as context so memory stays bounded.
    if (prefix_ > 0) {
      ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_));
      read_ -= prefix_;
      prefix_ = 0;
    }
    return out;
  }
  return {};
}

std::string StreamDecoder::flush() {
  std::span<const int32_t> all(ids_);
  std::string prefix_text = tokenizer_.decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  std::string new_text = tokenizer_.decode(all.subspan(prefix_), skip_special_);
  std::string out;
  if (new_text.size() > prefix_text.size() &&
      new_text.compare(0, prefix_text.size(), prefix_text) == 0)
    out = new_text.substr(prefix_text.size());
  ids_.clear();
  prefix_ = read_ = 0;
  return out;
}

}  // namespace hearth
