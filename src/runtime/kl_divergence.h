// KL divergence of a model's next-token distributions against a base model's, over the same
// text: what llama-perplexity's --kl-divergence-base measures, with a compact base file.
//
// The base file keeps, per scored position, the base's top-K log-probabilities (ids and f32
// values, sorted, best first), the log of the probability mass outside them, and the base's
// negative log-likelihood of the actual next token. With K = 64 that is 520 bytes a position,
// against 300 KB for llama.cpp's full-vocabulary uint16 rows at a 150k vocabulary. The KL is
// then computed over K + 1 outcomes (the top K and "anything else"): by the log-sum inequality
// it is at most the full-vocabulary KL and equals it when the tail's shape is unchanged; on a
// trained model the top 64 hold nearly all the mass, so the difference is the tail's share.
// The evaluated tokens are stored too, so a comparison on another text, context or vocabulary
// is refused by name.
//
// Layout (little-endian): "HRTHKLB1", then i64 n_vocab, ctx, n_chunks, first_scored, top_k;
// i32 tokens[n_chunks · ctx] (as evaluated, BOS substituted); then per scored position
// (n_chunks · (ctx − 1 − first_scored) of them, chunk by chunk): f32 nll, f32 log_rest,
// i32 ids[top_k], f32 log_probs[top_k].
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace hearth {

struct KlBaseShape {
  int64_t n_vocab = 0;
  int64_t ctx = 0;
  int64_t n_chunks = 0;
  int64_t first_scored = 0;  // positions [first_scored, ctx - 1) of a chunk are scored
  int64_t top_k = 0;

  int64_t scored_per_chunk() const { return ctx - 1 - first_scored; }
};

// The base's summary of one position.
struct KlBasePosition {
  float nll = 0;       // −log p(actual next token)
  float log_rest = 0;  // log of the mass outside the top K (−inf when there is none)
  std::vector<int32_t> ids;
  std::vector<float> log_probs;
};

// One position's summary from a row of logits [n_vocab] and the actual next token.
KlBasePosition kl_base_position(const float* logits, int64_t n_vocab, int32_t next, int64_t top_k);

// Writes a base file chunk by chunk; the file is complete (and checked by its size on reading)
// only once every chunk was added and finish() returned. Destroyed before that, it removes the
// file.
class KlBaseWriter {
 public:
  KlBaseWriter(const std::string& path, const KlBaseShape& shape,
               const std::vector<int32_t>& tokens);
  ~KlBaseWriter();
  // positions: shape.scored_per_chunk() summaries of the next chunk.
  void add_chunk(const std::vector<KlBasePosition>& positions);
  void finish();

 private:
  std::string path_;
  KlBaseShape shape_;
  std::FILE* file_ = nullptr;
  int64_t chunks_written_ = 0;
};

// Reads a base file, checking its magic, its shape's sanity and its exact size up front.
class KlBaseReader {
 public:
  explicit KlBaseReader(const std::string& path);
  ~KlBaseReader();
  const KlBaseShape& shape() const { return shape_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The next chunk's scored positions, in order.
  std::vector<KlBasePosition> read_chunk();
  // Throws naming the first field that differs from what this run evaluates.
  void check_matches(const KlBaseShape& run, const std::vector<int32_t>& tokens) const;

 private:
  std::string path_;
  KlBaseShape shape_;
  std::vector<int32_t> tokens_;
  std::FILE* file_ = nullptr;
  int64_t chunks_read_ = 0;
};

// One position compared: KL(base ‖ model) over the base's top K + rest, whether the model's
// most likely token is the base's, and both negative log-likelihoods of the next token.
struct KlPositionResult {
  double kl = 0;
  bool same_top = false;
  double nll = 0;
  double nll_base = 0;
};
KlPositionResult kl_compare_position(const KlBasePosition& base, const float* logits,
                                     int64_t n_vocab, int32_t next);

// llama-perplexity's summary of a comparison.
struct KlSummary {
  int64_t count = 0;
  double ppl = 0, ppl_base = 0;
  double ppl_ratio = 0, ppl_ratio_err = 0;  // exp(mean(nll − nll_base)), standard error
  double kl_mean = 0, kl_mean_err = 0;
  double kl_max = 0, kl_p999 = 0, kl_p99 = 0, kl_median = 0, kl_min = 0;
  double same_top = 0, same_top_err = 0;  // fractions
};
KlSummary kl_summarize(const std::vector<KlPositionResult>& results);

}  // namespace hearth
