// PCRE2 wrapper for the tokenizer's patterns (Split, Replace): compiled once with UTF, UCP (so \s,
// \w, \d and case folding are Unicode-aware, as in Oniguruma which HF tokenizers uses) and JIT.
// Invariant: matching never throws; subjects must be valid UTF-8 (checked once at encode entry).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace hearth::tok {

struct Span {
  size_t begin = 0;
  size_t end = 0;
};

class Regex {
 public:
  // Compiles an Oniguruma-syntax pattern (\uHHHH is rewritten to \x{HHHH}); throws
  // hearth::Error naming `where` when it does not compile.
  Regex(std::string_view pattern, const std::string& where);
  static Regex literal(std::string_view text, const std::string& where);
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  ~Regex();

  // Appends every non-overlapping match in `s` (leftmost first, empty matches advance one char).
  void find_all(std::string_view s, std::vector<Span>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace hearth::tok
