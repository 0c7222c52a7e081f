// `hearth perplexity`: llama-perplexity's method. The text is tokenized once (with BOS when the
// tokenizer adds one) and cut into chunks of --ctx tokens; each chunk is evaluated from an empty
// state and only the second half of its positions is scored, so every scored token has at least
// ctx/2 tokens of context. The first token of each chunk is replaced by BOS when the model has
// one. Prints the running estimate per chunk and "Final estimate: PPL = x +/- e", where e is the
// standard error propagated from the per-token negative log-likelihoods.
// --score-all scores every position after the first instead (what a plain transformers loop over
// non-overlapping windows computes).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/text_io.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

namespace {

struct PerplexityOptions {
  ModelOptions model;
  std::string file;
  int64_t ctx = 512;
  int64_t max_chunks = 0;
  bool score_all = false;
};

int run_perplexity(PerplexityOptions& o) {
  if (o.ctx < 4) fail("--ctx must be at least 4, got {}", o.ctx);
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
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * o.ctx, tokens.begin() + (c + 1) * o.ctx);
    if (bos) chunk[0] = *bos;
    auto state = model->new_sequence();
    model->forward(*state, chunk, LogitsRows::All, logits.data());
    for (int64_t i = first; i < o.ctx - 1; ++i) {
      const float* row = logits.data() + i * n_vocab;
      float max_logit = row[0];
      for (int64_t v = 1; v < n_vocab; ++v) max_logit = std::max(max_logit, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(double(row[v] - max_logit));
      const double token_nll = std::log(sum) + max_logit - row[chunk[size_t(i + 1)]];
      nll += token_nll;
      nll2 += token_nll * token_nll;
      ++count;
    }
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
  std::fprintf(stderr, "scored %lld tokens in %.2f s (%.1f tokens/s evaluated)\n", (long long)count,
               seconds, double(n_chunks * o.ctx) / seconds);
  return 0;
}

CommandRegistration reg(
    "perplexity", "perplexity of a text file (llama-perplexity method)", [](CLI::App& sub) {
      auto o = std::make_shared<PerplexityOptions>();
      add_model_options(sub, o->model);
      sub.add_option("-f,--file", o->file, "text file")->required();
      sub.add_option("-c,--ctx", o->ctx, "tokens per chunk")->capture_default_str();
      sub.add_option("--chunks", o->max_chunks, "evaluate at most N chunks (0 = all)");
      sub.add_flag("--score-all", o->score_all,
                   "score every position, not only the second half of each chunk");
      return [o] { return run_perplexity(*o); };
    });

}  // namespace
}  // namespace hearth::cli
