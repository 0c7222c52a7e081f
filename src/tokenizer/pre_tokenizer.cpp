// Pre-tokenizer steps. The split behaviours (Isolated, Removed, MergedWithPrevious,
// MergedWithNext, Contiguous, with invert) follow HF's NormalizedString::split exactly: matches
// and the gaps between them form segments, then the behaviour merges or drops segments.
#include "tokenizer/pre_tokenizer.h"

#include "tokenizer/bpe.h"
#include "tokenizer/json_util.h"
#include "tokenizer/pattern.h"
#include "tokenizer/scratch.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

namespace {

enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const nlohmann::json& j, const char* key, Behavior fallback,
                        const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  std::string b = it->is_string() ? it->get<std::string>() : "";
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "Removed") return Behavior::Removed;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail("{}.{}: unknown split behavior {}", where, key, it->dump());
}

struct Segment {
  size_t begin, end;
  bool match;
};

// Splits piece `p` by `matches` (relative to the piece) and appends the resulting pieces.
void split_piece(PieceList& pl, const Piece& p, const std::vector<Span>& matches, Behavior behavior,
                 bool invert) {
  thread_local std::vector<Segment> segs;
  thread_local std::vector<Segment> merged;
  segs.clear();
  size_t prev = 0;
  for (const auto& m : matches) {
    if (prev != m.begin) segs.push_back({prev, m.begin, invert});
    segs.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev != p.len) segs.push_back({prev, p.len, invert});

  const std::vector<Segment>* out = &segs;
  switch (behavior) {
    case Behavior::Isolated:
      for (auto& s : segs) s.match = false;
      break;
    case Behavior::Removed:
      break;
    case Behavior::Contiguous: {
      merged.clear();
      bool previous_match = false;
      for (const auto& s : segs) {
        if (s.match == previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.match;
      }
      out = &merged;
      break;
    }
    case Behavior::MergedWithPrevious: {
      merged.clear();
      bool previous_match = false;
      for (const auto& s : segs) {
        if (s.match && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.match;
      }
      out = &merged;
      break;
    }
    case Behavior::MergedWithNext: {
      merged.clear();
      bool previous_match = false;
      for (size_t k = segs.size(); k-- > 0;) {
        const auto& s = segs[k];
        if (s.match && !previous_match && !merged.empty()) {
          merged.back().begin = s.begin;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.match;
      }
      std::reverse(merged.begin(), merged.end());
      out = &merged;
      break;
    }
  }
  for (const auto& s : *out) {
    if (s.match || s.end == s.begin) continue;
    pl.next.push_back({p.off + s.begin, s.end - s.begin, p.first && s.begin == 0});
  }
  release_if_large(segs);
  release_if_large(merged);
}

template <typename Fn>
void for_each_piece(PieceList& pl, Fn fn) {
  pl.next.clear();
  for (size_t k = 0; k < pl.pieces.size(); ++k) fn(pl.pieces[k]);
  std::swap(pl.pieces, pl.next);
}

// Splits every piece at characters for which `pred` holds (each such char is one match).
template <typename Pred>
void split_chars(PieceList& pl, Behavior behavior, bool invert, Pred pred) {
  for_each_piece(pl, [&](const Piece& p) {
    pl.spans.clear();
    std::string_view s = pl.view(p);
    size_t i = 0;
    while (i < s.size()) {
      size_t start = i;
      if (pred(utf8_next(s, i))) pl.spans.push_back({start, i});
    }
    split_piece(pl, p, pl.spans, behavior, invert);
  });
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, Behavior b, bool invert)
      : re_(std::move(re)), behavior_(b), invert_(invert) {}
  void apply(PieceList& pl) const override {
    for_each_piece(pl, [&](const Piece& p) {
      pl.spans.clear();
      re_->find_all(pl.view(p), pl.spans);
      split_piece(pl, p, pl.spans, behavior_, invert_);
    });
  }

 private:
  std::unique_ptr<Regex> re_;
  Behavior behavior_;
  bool invert_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void apply(PieceList& pl) const override {
    split_chars(pl, individual_ ? Behavior::Isolated : Behavior::Contiguous, false, is_numeric);
  }

 private:
  bool individual_;
};

class PunctuationPreTokenizer final : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(Behavior b) : behavior_(b) {}
  void apply(PieceList& pl) const override { split_chars(pl, behavior_, false, is_punctuation); }

 private:
  Behavior behavior_;
};

class WhitespaceSplitPreTokenizer final : public PreTokenizer {
 public:
  void apply(PieceList& pl) const override {
    split_chars(pl, Behavior::Removed, false, is_whitespace);
  }
};

class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  WhitespacePreTokenizer() : re_("\\w+|[^\\w\\s]+", "Whitespace") {}
  void apply(PieceList& pl) const override {
    for_each_piece(pl, [&](const Piece& p) {
      pl.spans.clear();
      re_.find_all(pl.view(p), pl.spans);
      split_piece(pl, p, pl.spans, Behavior::Removed, true);
    });
  }

 private:
  Regex re_;
};

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Scheme { Always, First, Never };
  MetaspacePreTokenizer(std::string replacement, Scheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void apply(PieceList& pl) const override {
    std::string text;
    for_each_piece(pl, [&](const Piece& p) {
      std::string_view s = pl.view(p);
      text.clear();
      bool starts = s.substr(0, 1) == " " || s.substr(0, replacement_.size()) == replacement_;
      if (!starts && (scheme_ == Scheme::Always || (scheme_ == Scheme::First && p.first)))
        text += replacement_;
      for (char c : s) {
        if (c == ' ') {
          text += replacement_;
        } else {
          text += c;
        }
      }
      Piece np{pl.arena.size(), text.size(), p.first};
      pl.arena += text;
      if (!split_) {
        pl.next.push_back(np);
        return;
      }
      pl.spans.clear();
      for (size_t pos = text.find(replacement_); pos != std::string::npos;
           pos = text.find(replacement_, pos + replacement_.size()))
        pl.spans.push_back({pos, pos + replacement_.size()});
      split_piece(pl, np, pl.spans, Behavior::MergedWithNext, false);
    });
  }

 private:
  std::string replacement_;
  Scheme scheme_;
  bool split_;
};

}  // namespace

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_)
      re_ = std::make_unique<Regex>(
          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
          "ByteLevel");
  }
  void set_map_chars(bool v) { map_chars_ = v; }
  void apply(PieceList& pl) const override {
    if (add_prefix_space_ || use_regex_) {
      for_each_piece(pl, [&](const Piece& p0) {
        Piece p = p0;
        if (add_prefix_space_ && pl.view(p).substr(0, 1) != " ") {
          std::string text = " ";
          text += pl.view(p);
          p = {pl.arena.size(), text.size(), p.first};
          pl.arena += text;
        }
        if (use_regex_) {
          pl.spans.clear();
          re_->find_all(pl.view(p), pl.spans);
          split_piece(pl, p, pl.spans, Behavior::Isolated, false);
        } else {
          pl.next.push_back(p);
        }
      });
    }
    if (map_chars_) {
      std::string text;
      for (auto& p : pl.pieces) {
        text.clear();
        byte_level_encode(pl.view(p), text);
        p = {pl.arena.size(), text.size(), p.first};
        pl.arena += text;
      }
    }
  }

 private:
  bool add_prefix_space_;
  bool use_regex_;
  bool map_chars_ = true;
  std::unique_ptr<Regex> re_;
};

void PreTokenizerChain::set_byte_mode() {
  if (final_byte_level) final_byte_level->set_map_chars(false);
}

namespace {
void add_steps(PreTokenizerChain& chain, const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return;
  std::string type = json_type(j, where);
  if (type == "Sequence") {
    const auto& arr = json_array(j, "pretokenizers", where);
    for (size_t i = 0; i < arr.size(); ++i)
      add_steps(chain, arr[i], fmt::format("{}.pretokenizers[{}]", where, i));
    return;
  }
  if (type == "ByteLevel") {
    chain.steps.push_back(
        std::make_unique<ByteLevelPreTokenizer>(json_bool_or(j, "add_prefix_space", true, where),
                                                json_bool_or(j, "use_regex", true, where)));
    return;
  }
  if (type == "Split") {
    auto re = make_pattern(json_field(j, "pattern", where), where + ".pattern");
    chain.steps.push_back(std::make_unique<SplitPreTokenizer>(
        std::move(re), parse_behavior(j, "behavior", Behavior::Isolated, where),
        json_bool_or(j, "invert", false, where)));
    return;
  }
  if (type == "Metaspace") {
    std::string replacement = json_string_or(j, "replacement", "\xE2\x96\x81", where);
    auto scheme = MetaspacePreTokenizer::Scheme::Always;
    std::string s = json_string_or(j, "prepend_scheme", "always", where);
    if (s == "first") {
      scheme = MetaspacePreTokenizer::Scheme::First;
    } else if (s == "never") {
      scheme = MetaspacePreTokenizer::Scheme::Never;
    } else if (s != "always") {
      fail("{}.prepend_scheme: unknown value {:?}", where, s);
    }
    if (!json_bool_or(j, "add_prefix_space", true, where))
      scheme = MetaspacePreTokenizer::Scheme::Never;
    chain.steps.push_back(std::make_unique<MetaspacePreTokenizer>(
        replacement, scheme, json_bool_or(j, "split", true, where)));
    return;
  }
  if (type == "Digits") {
    chain.steps.push_back(
        std::make_unique<DigitsPreTokenizer>(json_bool_or(j, "individual_digits", false, where)));
    return;
  }
  if (type == "Whitespace") {
    chain.steps.push_back(std::make_unique<WhitespacePreTokenizer>());
    return;
  }
  if (type == "WhitespaceSplit") {
    chain.steps.push_back(std::make_unique<WhitespaceSplitPreTokenizer>());
    return;
  }
  if (type == "Punctuation") {
    chain.steps.push_back(std::make_unique<PunctuationPreTokenizer>(
        parse_behavior(j, "behavior", Behavior::Isolated, where)));
    return;
  }
  fail("{}.type: unsupported pre-tokenizer {:?}", where, type);
}
}  // namespace

PreTokenizerChain make_pre_tokenizer(const nlohmann::json& j, const std::string& where) {
  PreTokenizerChain chain;
  add_steps(chain, j, where);
  size_t byte_levels = 0;
  for (const auto& s : chain.steps)
    if (dynamic_cast<ByteLevelPreTokenizer*>(s.get())) ++byte_levels;
  if (byte_levels == 1 && !chain.steps.empty())
    chain.final_byte_level = dynamic_cast<ByteLevelPreTokenizer*>(chain.steps.back().get());
  return chain;
}

}  // namespace hearth::tok
