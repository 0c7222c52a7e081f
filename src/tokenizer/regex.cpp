// PCRE2 compile and match loop. Match data and the JIT stack are per thread so that one compiled
// pattern serves concurrent encodes. On a JIT resource error the interpreter retries; if that
// fails too the rest of the subject is treated as unmatched (no throw on the hot path).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace hearth::tok {

namespace {
std::string rewrite_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size());
  auto is_hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  };
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 'u' && i + 5 < p.size() && is_hex(p[i + 2]) && is_hex(p[i + 3]) &&
          is_hex(p[i + 4]) && is_hex(p[i + 5])) {
        out += "\\x{";
        out.append(p.substr(i + 2, 4));
        out += "}";
        i += 5;
        continue;
      }
      out += p[i];
      out += p[i + 1];
      ++i;
      continue;
    }
    out += p[i];
  }
  return out;
}

struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(16, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}
}  // namespace

Regex::Regex(std::string_view pattern, const std::string& where) : pattern_(pattern) {
  std::string p = rewrite_oniguruma(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP,
                        &error, &offset, nullptr);
  if (!code_) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail("{}: regex {:?} does not compile at offset {}: {}", where, std::string(pattern), offset,
         reinterpret_cast<const char*>(message));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex Regex::literal(std::string_view text, const std::string& where) {
  std::string p = "\\Q";
  // \Q...\E cannot contain \E; split it out if present.
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == 'E') {
      p += "\\E\\\\\\QE";
      ++i;
    } else {
      p += text[i];
    }
  }
  p += "\\E";
  Regex r(p, where);
  r.pattern_ = std::string(text);
  return r;
}

Regex::Regex(Regex&& o) noexcept : code_(o.code_), jit_(o.jit_), pattern_(std::move(o.pattern_)) {
  o.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& o) noexcept {
  if (this != &o) {
    pcre2_code_free(code_);
    code_ = o.code_;
    jit_ = o.jit_;
    pattern_ = std::move(o.pattern_);
    o.code_ = nullptr;
  }
  return *this;
}

Regex::~Regex() { pcre2_code_free(code_); }

void Regex::find_all(std::string_view s, std::vector<Span>& out) const {
  auto& st = thread_match_state();
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc;
    if (jit_) {
      rc = pcre2_jit_match(code_, subject, s.size(), pos, 0, st.data, st.context);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        rc = pcre2_match(code_, subject, s.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.data,
                         nullptr);
    } else {
      rc = pcre2_match(code_, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, st.data, nullptr);
    }
    if (rc < 0) return;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    size_t b = ov[0], e = ov[1];
    if (e < b) return;  // \K tricks; not used by tokenizer patterns
    out.push_back({b, e});
    if (e == b) {
      if (e >= s.size()) return;
      pos = e + utf8_len(static_cast<unsigned char>(s[e]));
    } else {
      pos = e;
    }
  }
}

}  // namespace hearth::tok
