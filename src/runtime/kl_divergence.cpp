#include "runtime/kl_divergence.h"

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace hearth {

namespace {

constexpr char kMagic[8] = {'H', 'R', 'T', 'H', 'K', 'L', 'B', '1'};
constexpr int64_t kHeaderFields = 5;
// Bounds that keep a corrupt header from reaching an allocation.
constexpr int64_t kMaxVocab = int64_t(1) << 24;
constexpr int64_t kMaxTokens = int64_t(1) << 31;

int64_t position_bytes(int64_t top_k) { return 8 + top_k * 8; }

int64_t expected_size(const KlBaseShape& s) {
  return int64_t(sizeof kMagic) + kHeaderFields * 8 + s.n_chunks * s.ctx * 4 +
         s.n_chunks * s.scored_per_chunk() * position_bytes(s.top_k);
}

// log Σ exp(row), in double, with the row's maximum.
double log_sum_exp(const float* row, int64_t n, float* max_out) {
  float m = row[0];
  for (int64_t v = 1; v < n; ++v) m = std::max(m, row[v]);
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += std::exp(double(row[v]) - m);
  *max_out = m;
  return std::log(sum) + m;
}

void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes != 0 && std::fwrite(data, 1, bytes, f) != bytes)
    fail("{}: write failed: {}", path, std::strerror(errno));
}

void read_all(std::FILE* f, void* data, size_t bytes, const std::string& path) {
  if (bytes != 0 && std::fread(data, 1, bytes, f) != bytes)
    fail("{}: KL base file is truncated", path);
}

}  // namespace

KlBasePosition kl_base_position(const float* logits, int64_t n_vocab, int32_t next, int64_t top_k) {
  if (top_k < 1 || top_k > n_vocab)
    fail("KL base: top-k {} must be in [1, {}] (the vocabulary)", top_k, n_vocab);
  float max_logit = 0;
  const double lse = log_sum_exp(logits, n_vocab, &max_logit);
  // The top K by logit, ties to the lower id, so the first is the greedy token.
  std::vector<int32_t> order(static_cast<size_t>(n_vocab));
  std::iota(order.begin(), order.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::nth_element(order.begin(), order.begin() + (top_k - 1), order.end(), better);
  std::sort(order.begin(), order.begin() + top_k, better);
  KlBasePosition p;
  p.nll = float(lse - logits[next]);
  p.ids.assign(order.begin(), order.begin() + top_k);
  p.log_probs.resize(static_cast<size_t>(top_k));
  for (int64_t i = 0; i < top_k; ++i)
    p.log_probs[size_t(i)] = float(logits[order[size_t(i)]] - lse);
  // The tail summed directly (not 1 − top), so a tiny remainder keeps its precision.
  double rest = 0;
  for (size_t i = size_t(top_k); i < order.size(); ++i)
    rest += std::exp(double(logits[order[i]]) - max_logit);
  p.log_rest =
      rest > 0 ? float(std::log(rest) + max_logit - lse) : -std::numeric_limits<float>::infinity();
  return p;
}

KlBaseWriter::KlBaseWriter(const std::string& path, const KlBaseShape& shape,
                           const std::vector<int32_t>& tokens)
    : path_(path), shape_(shape) {
  if (int64_t(tokens.size()) != shape.n_chunks * shape.ctx)
    fail("KL base: {} tokens for {} chunks of {}", tokens.size(), shape.n_chunks, shape.ctx);
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) fail("cannot write KL base file '{}': {}", path, std::strerror(errno));
  write_all(file_, kMagic, sizeof kMagic, path_);
  const int64_t header[kHeaderFields] = {shape.n_vocab, shape.ctx, shape.n_chunks,
                                         shape.first_scored, shape.top_k};
  write_all(file_, header, sizeof header, path_);
  write_all(file_, tokens.data(), tokens.size() * 4, path_);
}

// An unfinished file is removed, so no half-written base is ever compared against.
KlBaseWriter::~KlBaseWriter() {
  if (!file_) return;
  std::fclose(file_);
  std::remove(path_.c_str());
}

void KlBaseWriter::add_chunk(const std::vector<KlBasePosition>& positions) {
  if (chunks_written_ >= shape_.n_chunks) fail("{}: more chunks than the header says", path_);
  if (int64_t(positions.size()) != shape_.scored_per_chunk())
    fail("{}: a chunk needs {} positions, got {}", path_, shape_.scored_per_chunk(),
         positions.size());
  for (const KlBasePosition& p : positions) {
    if (int64_t(p.ids.size()) != shape_.top_k || p.log_probs.size() != p.ids.size())
      fail("{}: a position needs top-k {} entries", path_, shape_.top_k);
    const float head[2] = {p.nll, p.log_rest};
    write_all(file_, head, sizeof head, path_);
    write_all(file_, p.ids.data(), p.ids.size() * 4, path_);
    write_all(file_, p.log_probs.data(), p.log_probs.size() * 4, path_);
  }
  ++chunks_written_;
}

void KlBaseWriter::finish() {
  if (chunks_written_ != shape_.n_chunks)
    fail("{}: {} of {} chunks written", path_, chunks_written_, shape_.n_chunks);
  const bool ok = std::fflush(file_) == 0 && std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok) fail("{}: write failed: {}", path_, std::strerror(errno));
}

KlBaseReader::KlBaseReader(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) fail("cannot read KL base file '{}': {}", path, std::strerror(errno));
  char magic[sizeof kMagic] = {};
  if (std::fread(magic, 1, sizeof magic, file_) != sizeof magic ||
      std::memcmp(magic, kMagic, sizeof magic) != 0)
    fail("{}: not a hearth KL base file (written by perplexity --kl-base F --save-logits)", path);
  int64_t h[kHeaderFields];
  read_all(file_, h, sizeof h, path_);
  shape_ = {h[0], h[1], h[2], h[3], h[4]};
  const KlBaseShape& s = shape_;
  if (s.n_vocab < 1 || s.n_vocab > kMaxVocab || s.ctx < 2 || s.n_chunks < 1 ||
      s.ctx * s.n_chunks > kMaxTokens || s.first_scored < 0 || s.first_scored >= s.ctx - 1 ||
      s.top_k < 1 || s.top_k > s.n_vocab)
    fail("{}: KL base header is corrupt (vocab {}, ctx {}, chunks {}, first {}, top-k {})", path,
         s.n_vocab, s.ctx, s.n_chunks, s.first_scored, s.top_k);
  if (std::fseek(file_, 0, SEEK_END) != 0) fail("{}: cannot seek", path);
  const int64_t size = std::ftell(file_);
  if (size != expected_size(s))
    fail("{}: KL base file has {} bytes, its header implies {} (truncated or corrupt)", path, size,
         expected_size(s));
  std::fseek(file_, long(sizeof kMagic + sizeof h), SEEK_SET);
  tokens_.resize(static_cast<size_t>(s.n_chunks * s.ctx));
  read_all(file_, tokens_.data(), tokens_.size() * 4, path_);
}

KlBaseReader::~KlBaseReader() {
  if (file_) std::fclose(file_);
}

std::vector<KlBasePosition> KlBaseReader::read_chunk() {
  if (chunks_read_ >= shape_.n_chunks) fail("{}: no chunk {} in the file", path_, chunks_read_);
  std::vector<KlBasePosition> out(static_cast<size_t>(shape_.scored_per_chunk()));
  for (KlBasePosition& p : out) {
    float head[2];
    read_all(file_, head, sizeof head, path_);
    p.nll = head[0];
    p.log_rest = head[1];
    p.ids.resize(static_cast<size_t>(shape_.top_k));
    p.log_probs.resize(p.ids.size());
    read_all(file_, p.ids.data(), p.ids.size() * 4, path_);
    read_all(file_, p.log_probs.data(), p.log_probs.size() * 4, path_);
    for (int32_t id : p.ids)
      if (id < 0 || id >= shape_.n_vocab)
        fail("{}: token id {} in chunk {} is outside the vocabulary of {}", path_, id, chunks_read_,
             shape_.n_vocab);
  }
  ++chunks_read_;
  return out;
}

void KlBaseReader::check_matches(const KlBaseShape& run, const std::vector<int32_t>& tokens) const {
  const KlBaseShape& s = shape_;
  if (run.n_vocab != s.n_vocab)
    fail("{}: the base model's vocabulary has {} tokens, this model's {}", path_, s.n_vocab,
         run.n_vocab);
  if (run.ctx != s.ctx) fail("{}: written with --ctx {}, this run uses {}", path_, s.ctx, run.ctx);
  if (run.first_scored != s.first_scored)
    fail("{}: written {} --score-all, this run {}", path_, s.first_scored == 0 ? "with" : "without",
         run.first_scored == 0 ? "with" : "without");
  if (run.n_chunks != s.n_chunks)
    fail("{}: holds {} chunks, this run evaluates {} (same text and --chunks needed)", path_,
         s.n_chunks, run.n_chunks);
  for (size_t i = 0; i < tokens.size() && i < tokens_.size(); ++i)
    if (tokens[i] != tokens_[i])
      fail("{}: token {} differs ({} in the base, {} here): not the same text and tokenizer", path_,
           i, tokens_[i], tokens[i]);
}

KlPositionResult kl_compare_position(const KlBasePosition& base, const float* logits,
                                     int64_t n_vocab, int32_t next) {
  float max_logit = 0;
  const double lse = log_sum_exp(logits, n_vocab, &max_logit);
  KlPositionResult r;
  r.nll = lse - logits[next];
  r.nll_base = base.nll;
  int32_t argmax = 0;
  for (int64_t v = 1; v < n_vocab; ++v)
    if (logits[v] > logits[argmax]) argmax = int32_t(v);
  r.same_top = !base.ids.empty() && argmax == base.ids[0];
  // The model's log-probs are rounded to f32 like the stored ones, so a model compared with
  // itself gives exactly 0.
  thread_local std::vector<uint8_t> in_top;
  in_top.assign(static_cast<size_t>(n_vocab), 0);
  double kl = 0;
  for (size_t i = 0; i < base.ids.size(); ++i) {
    const int32_t id = base.ids[i];
    in_top[size_t(id)] = 1;
    const double lp = base.log_probs[i], lq = float(logits[id] - lse);
    kl += std::exp(lp) * (lp - lq);
  }
  double rest = 0;
  for (int64_t v = 0; v < n_vocab; ++v)
    if (!in_top[size_t(v)]) rest += std::exp(double(logits[v]) - max_logit);
  if (std::isfinite(base.log_rest)) {
    const double lq_rest =
        rest > 0 ? double(float(std::log(rest) + max_logit - lse)) : std::log(DBL_MIN);
    kl += std::exp(double(base.log_rest)) * (double(base.log_rest) - lq_rest);
  }
  r.kl = kl;
  return r;
}

KlSummary kl_summarize(const std::vector<KlPositionResult>& results) {
  KlSummary s;
  const int64_t n = int64_t(results.size());
  s.count = n;
  if (n == 0) return s;
  double nll = 0, nll_base = 0, d = 0, d2 = 0, kl = 0, kl2 = 0, same = 0;
  std::vector<double> kls;
  kls.reserve(results.size());
  for (const KlPositionResult& r : results) {
    nll += r.nll;
    nll_base += r.nll_base;
    d += r.nll - r.nll_base;
    d2 += (r.nll - r.nll_base) * (r.nll - r.nll_base);
    kl += r.kl;
    kl2 += r.kl * r.kl;
    same += r.same_top ? 1 : 0;
    kls.push_back(r.kl);
  }
  // Standard error of a mean from the sums, (n − 1) in the variance as llama-perplexity has it.
  auto std_err = [n](double sum, double sum2) {
    if (n < 2) return 0.0;
    const double mean = sum / double(n);
    return std::sqrt(std::max(sum2 / double(n) - mean * mean, 0.0) / double(n - 1));
  };
  s.ppl = std::exp(nll / double(n));
  s.ppl_base = std::exp(nll_base / double(n));
  s.ppl_ratio = std::exp(d / double(n));
  s.ppl_ratio_err = s.ppl_ratio * std_err(d, d2);
  s.kl_mean = kl / double(n);
  s.kl_mean_err = std_err(kl, kl2);
  s.same_top = same / double(n);
  s.same_top_err = n > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / double(n - 1)) : 0.0;
  std::sort(kls.begin(), kls.end());
  auto quantile = [&](double q) { return kls[size_t(std::llround(q * double(n - 1)))]; };
  s.kl_min = kls.front();
  s.kl_max = kls.back();
  s.kl_median = quantile(0.5);
  s.kl_p99 = quantile(0.99);
  s.kl_p999 = quantile(0.999);
  return s;
}

}  // namespace hearth
