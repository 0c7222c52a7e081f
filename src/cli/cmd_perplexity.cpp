// `hearth perplexity`: llama-perplexity's method. The text is tokenized once (with BOS when the
// tokenizer adds one) and cut into chunks of --ctx tokens; each chunk is evaluated from an empty
// state and only the second half of its positions is scored, so every scored token has at least
// ctx/2 tokens of context. The first token of each chunk is replaced by BOS when the model has
// one. Prints the running estimate per chunk and "Final estimate: PPL = x +/- e", where e is the
// standard error propagated from the per-token negative log-likelihoods.
// --score-all scores every position after the first instead (what a plain transformers loop over
// non-overlapping windows computes).
// KL divergence against a base model, as llama-perplexity's --kl-divergence-base: first
// `--kl-base FILE --save-logits` with the base model writes its distributions over the scored
// positions (runtime/kl_divergence.h: top-k log-probs + the rest's mass); then `--kl-base FILE`
// with another model (a quantized copy) on the same text and --ctx prints the KL statistics, the
// top-1 agreement and the perplexity ratio.
// -b/--batch N evaluates each chunk N tokens per forward (as llama-perplexity's -b): with a few
// tokens per step the products run the decode kernels, so the figures are those of generation
// (the CPU's 4 and 8-bit affine decode uses int8 activations; prefill does not).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/text_io.h"
#include "core/error.h"
#include "runtime/kl_divergence.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

namespace {

struct PerplexityOptions {
  ModelOptions model;
  std::string file;
  int64_t ctx = 512;
  int64_t max_chunks = 0;
  int64_t batch = 0;  // tokens per forward; 0: the whole chunk
  bool score_all = false;
  std::string kl_base;
  bool save_logits = false;
  int64_t kl_top_k = 64;
};

void print_kl_summary(const KlSummary& s) {
  std::printf("\n====== Perplexity statistics (%lld tokens) ======\n", (long long)s.count);
  std::printf("Mean PPL(Q)               : %10.6f\n", s.ppl);
  std::printf("Mean PPL(base)            : %10.6f\n", s.ppl_base);
  std::printf("Mean PPL(Q)/PPL(base)     : %10.6f +/- %.6f\n", s.ppl_ratio, s.ppl_ratio_err);
  std::printf("\n====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f +/- %.6f\n", s.kl_mean, s.kl_mean_err);
  std::printf("Maximum KLD: %10.6f\n", s.kl_max);
  std::printf("99.9%%   KLD: %10.6f\n", s.kl_p999);
  std::printf("99.0%%   KLD: %10.6f\n", s.kl_p99);
  std::printf("Median  KLD: %10.6f\n", s.kl_median);
  std::printf("Minimum KLD: %10.6f\n", s.kl_min);
  std::printf("Same top p : %6.3f +/- %.3f %%\n", 100 * s.same_top, 100 * s.same_top_err);
}

int run_perplexity(PerplexityOptions& o) {
  if (o.ctx < 4) fail("--ctx must be at least 4, got {}", o.ctx);
  if (o.batch < 0) fail("--batch must be >= 1 (or 0 for the whole chunk), got {}", o.batch);
  if (o.save_logits && o.kl_base.empty()) fail("--save-logits needs --kl-base FILE to write to");
  std::ifstream in(o.file, std::ios::binary);
  if (!in) fail("cannot read text file '{}'", o.file);
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto model = load_model_from(o.model);
  TextCodec codec(o.model.dir);
  std::vector<int32_t> tokens = codec.encode(buffer.str());
  const int64_t n_chunks_all = int64_t(tokens.size()) / o.ctx;
  if (n_chunks_all == 0)
    fail("{}: {} tokens is fewer than one --ctx chunk of {}", o.file, tokens.size(), o.ctx);
  const int64_t n_chunks = o.max_chunks > 0 ? std::min(o.max_chunks, n_chunks_all) : n_chunks_all;
  const std::optional<int32_t> bos =
      codec.tokenizer()->adds_bos() ? codec.tokenizer()->bos_id() : std::nullopt;
  const int64_t n_vocab = model->info().n_vocab;
  std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld\n", tokens.size(),
               (long long)n_chunks, (long long)o.ctx);
  std::vector<float> logits(size_t(o.ctx * n_vocab));
  double nll = 0.0, nll2 = 0.0;
  int64_t count = 0;
  const int64_t first = o.score_all ? 0 : o.ctx / 2;
  // The tokens as evaluated, chunk after chunk (BOS in front), which a KL base file records.
  std::vector<int32_t> evaluated(tokens.begin(), tokens.begin() + n_chunks * o.ctx);
  if (bos)
    for (int64_t c = 0; c < n_chunks; ++c) evaluated[size_t(c * o.ctx)] = *bos;
  const KlBaseShape shape{n_vocab, o.ctx, n_chunks, first, o.kl_top_k};
  std::unique_ptr<KlBaseWriter> kl_writer;
  std::unique_ptr<KlBaseReader> kl_reader;
  std::vector<KlPositionResult> kl_results;
  if (o.save_logits) {
    if (o.kl_top_k < 1 || o.kl_top_k > n_vocab)
      fail("--kl-top-k must be in [1, {}] (the vocabulary), got {}", n_vocab, o.kl_top_k);
    kl_writer = std::make_unique<KlBaseWriter>(o.kl_base, shape, evaluated);
  } else if (!o.kl_base.empty()) {
    kl_reader = std::make_unique<KlBaseReader>(o.kl_base);
    kl_reader->check_matches(shape, evaluated);
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(evaluated.begin() + c * o.ctx, evaluated.begin() + (c + 1) * o.ctx);
    auto state = model->new_sequence();
    const int64_t step = o.batch > 0 ? o.batch : o.ctx;
    for (int64_t i = 0; i < o.ctx; i += step) {
      const int64_t len = std::min(step, o.ctx - i);
      model->forward(*state, std::span<const int32_t>(chunk).subspan(size_t(i), size_t(len)),
                     LogitsRows::All, logits.data() + i * n_vocab);
    }
    std::vector<KlBasePosition> base;
    if (kl_reader) base = kl_reader->read_chunk();
    if (kl_writer) base.reserve(size_t(shape.scored_per_chunk()));
    for (int64_t i = first; i < o.ctx - 1; ++i) {
      const float* row = logits.data() + i * n_vocab;
      const int32_t next = chunk[size_t(i + 1)];
      if (kl_writer) base.push_back(kl_base_position(row, n_vocab, next, o.kl_top_k));
      if (kl_reader)
        kl_results.push_back(kl_compare_position(base[size_t(i - first)], row, n_vocab, next));
      float max_logit = row[0];
      for (int64_t v = 1; v < n_vocab; ++v) max_logit = std::max(max_logit, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double(row[v] - max_logit));
      const double token_nll = std::log(sum) + max_logit - row[chunk[size_t(i + 1)]];
      nll += token_nll;
      nll2 += token_nll * token_nll;
      ++count;
    }
    if (kl_writer) kl_writer->add_chunk(base);
    std::printf("[%lld]%.4f,", (long long)(c + 1), std::exp(nll / double(count)));
    std::fflush(stdout);
  }
  const double mean = nll / double(count);
  const double var = nll2 / double(count) - mean * mean;
  const double ppl = std::exp(mean);
  const double err = count > 1 ? ppl * std::sqrt(std::max(var, 0.0) / double(count - 1)) : 0.0;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, err);
  if (kl_writer) {
    kl_writer->finish();
    std::fprintf(stderr, "wrote the base distributions (top %lld) to %s\n", (long long)o.kl_top_k,
                 o.kl_base.c_str());
  }
  if (kl_reader) print_kl_summary(kl_summarize(kl_results));
  std::fprintf(stderr, "scored %lld tokens in %.2f s (%.1f tokens/s evaluated)\n", (long long)count,
               seconds, double(n_chunks * o.ctx) / seconds);
  return 0;
}

CommandRegistration perplexity_command(
    "perplexity", "perplexity of a text file (llama-perplexity method)", [](CLI::App& sub) {
      auto o = std::make_shared<PerplexityOptions>();
      add_model_options(sub, o->model);
      sub.add_option("-f,--file", o->file, "text file")->required();
      sub.add_option("-c,--ctx", o->ctx, "tokens per chunk")->capture_default_str();
      sub.add_option("--chunks", o->max_chunks, "evaluate at most N chunks (0 = all)");
      sub.add_option("-b,--batch", o->batch,
                     "tokens per forward within a chunk (0 = the whole chunk; 1 scores what "
                     "generation computes)")
          ->capture_default_str();
      sub.add_flag("--score-all", o->score_all,
                   "score every position, not only the second half of each chunk");
      sub.add_option("--kl-base", o->kl_base,
                     "KL divergence against a base model's distributions in FILE (written with "
                     "--save-logits)");
      sub.add_flag("--save-logits", o->save_logits,
                   "write this model's distributions to the --kl-base FILE instead of comparing");
      sub.add_option("--kl-top-k", o->kl_top_k,
                     "log-probs kept per position in a --save-logits file")
          ->capture_default_str();
      return [o] { return run_perplexity(*o); };
    });

}  // namespace
}  // namespace hearth::cli
