// Encode and decode, in HF tokenizers' order: added tokens are split out of the raw text, each
// remaining piece is normalized, normalized added tokens are split out, pre-tokenizers cut words,
// the BPE model turns words into ids, the post-processor adds special tokens. Decode maps ids to
// token strings (skipping unknown ids and, if asked, special tokens) and runs the decoder chain.
#include "tokenizer/tokenizer.h"

#include "tokenizer/scratch.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace hearth {

using namespace tok;

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  const Impl& im = *impl_;
  std::string repaired;
  std::string_view text = input;
  if (!utf8_is_valid(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  thread_local PieceList pl;
  thread_local std::vector<TextSplit> raw_splits;
  thread_local std::vector<TextSplit> norm_splits;

  auto run_model = [&](std::string_view piece, bool first) {
    pl.arena.assign(piece);
    pl.pieces.assign(1, Piece{0, piece.size(), first});
    im.pre_tokenizer.apply(pl);
    for (const auto& p : pl.pieces) im.model.tokenize(pl.view(p), ids);
  };

  raw_splits.clear();
  im.raw_added.split(text, raw_splits);
  for (const auto& s : raw_splits) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      continue;
    }
    std::string_view piece = text.substr(s.begin, s.end - s.begin);
    std::string normalized;
    if (im.normalizer) {
      normalized = im.normalizer->apply(std::string(piece));
      piece = normalized;
    }
    if (im.normalized_added.empty()) {
      if (!piece.empty()) run_model(piece, s.begin == 0);
      continue;
    }
    norm_splits.clear();
    im.normalized_added.split(piece, norm_splits);
    for (const auto& n : norm_splits) {
      if (n.id >= 0) {
        ids.push_back(n.id);
      } else {
        run_model(piece.substr(n.begin, n.end - n.begin), s.begin == 0 && n.begin == 0);
      }
    }
  }
  for (auto* v : {&pl.pieces, &pl.next}) release_if_large(*v);
  release_if_large(pl.arena);
  release_if_large(pl.spans);
  release_if_large(raw_splits);
  release_if_large(norm_splits);
  if (text.size() > kScratchKeepBytes) release_word_cache();
  if (add_special_tokens) im.post_processor.apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& im = *impl_;
  auto keep = [&](int32_t id) {
    if (id < 0 || static_cast<size_t>(id) >= im.id_kind.size()) return false;
    uint8_t kind = im.id_kind[static_cast<size_t>(id)];
    return kind != Impl::kNone && !(skip_special_tokens && kind == Impl::kSpecial);
  };
  if (im.byte_level_decode_fast) {
    std::string bytes;
    for (int32_t id : ids)
      if (keep(id)) bytes += im.id_bytes[static_cast<size_t>(id)];
    return utf8_is_valid(bytes) ? bytes : utf8_lossy(bytes);
  }
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids)
    if (keep(id)) tokens.emplace_back(im.id_text[static_cast<size_t>(id)]);
  std::string out;
  if (im.decoder) {
    im.decoder->decode_chain(tokens);
    for (const auto& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
  }
  return out;
}

std::string Tokenizer::token_text(int32_t id) const {
  const Impl& im = *impl_;
  if (id < 0 || static_cast<size_t>(id) >= im.id_text.size()) return {};
  return std::string(im.id_text[static_cast<size_t>(id)]);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const Impl& im = *impl_;
  auto it = im.added_index.find(std::string(token));
  if (it != im.added_index.end()) return it->second;
  int32_t id = im.model.find(token);
  if (id >= 0) return id;
  return std::nullopt;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_text.size()); }

bool Tokenizer::is_special(int32_t id) const {
  const Impl& im = *impl_;
  return id >= 0 && static_cast<size_t>(id) < im.id_kind.size() &&
         im.id_kind[static_cast<size_t>(id)] == Impl::kSpecial;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad_id; }
const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
const std::string& Tokenizer::pad_token() const { return impl_->pad_token; }

bool Tokenizer::adds_bos() const {
  const auto& p = impl_->post_processor.prefix;
  return impl_->bos_id && !p.empty() && p.front() == *impl_->bos_id;
}

bool Tokenizer::adds_eos() const {
  const auto& s = impl_->post_processor.suffix;
  return impl_->eos_id && !s.empty() && s.back() == *impl_->eos_id;
}

std::string Tokenizer::chat_template(std::string_view name) const {
  auto it = impl_->chat_templates.find(std::string(name));
  return it == impl_->chat_templates.end() ? std::string() : it->second;
}

std::vector<std::string> Tokenizer::chat_template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, _] : impl_->chat_templates) names.push_back(name);
  return names;
}

}  // namespace hearth
