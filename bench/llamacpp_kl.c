// KL divergence of a llama.cpp model (a GGUF) against a hearth KL base file, so that llama.cpp's
// quantized copies are measured on exactly the tokens, chunks and scored positions, and with
// exactly the formula, of `hearth perplexity --kl-base BASE` (src/runtime/kl_divergence.*).
// Built against node-llama-cpp's prebuilt libllama by bench/compare_quant_quality.sh.
//   llamacpp_kl MODEL.gguf BASE [-t THREADS] [--kv-type f32|f16] [-v]
// The base file ("HRTHKLB1", written by `hearth perplexity --kl-base BASE --save-logits`) holds
// the evaluated tokens (BOS already substituted), so no tokenizer runs here: each chunk of ctx
// tokens is decoded from an empty memory with logits at every position. For each scored position
// the KL(base || model) is taken over the base's top K + "the rest", the model's log-probs
// rounded to f32 as hearth does, so a model compared with its own base gives 0. The output has
// hearth's line format (same labels), so one parser reads both. The model's vocabulary must
// have the base's size; otherwise it refuses. KV cache in f32 by default (hearth's CPU cache),
// so only the weights differ; `--kv-type f16` gives llama-perplexity's default.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <float.h>
#include <libgen.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

typedef struct {
  int64_t n_vocab, ctx, n_chunks, first_scored, top_k;
} BaseShape;

typedef struct {
  double kl, nll, nll_base;
  int same_top;
} PositionResult;

static int verbose = 0;

static void log_filter(enum ggml_log_level level, const char* text, void* user) {
  (void)user;
  if (verbose || level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void die(const char* msg, const char* arg) {
  fprintf(stderr, "llamacpp_kl: %s%s\n", msg, arg ? arg : "");
  exit(1);
}

static void read_exact(FILE* f, void* p, size_t bytes, const char* path) {
  if (bytes && fread(p, 1, bytes, f) != bytes) die("KL base file is truncated: ", path);
}

// log Σ exp(row) in double, and the row's maximum (kl_divergence.cpp's log_sum_exp).
static double log_sum_exp(const float* row, int64_t n, float* max_out) {
  float m = row[0];
  for (int64_t v = 1; v < n; ++v)
    if (row[v] > m) m = row[v];
  double sum = 0;
  for (int64_t v = 0; v < n; ++v) sum += exp((double)row[v] - m);
  *max_out = m;
  return log(sum) + m;
}

// kl_compare_position of src/runtime/kl_divergence.cpp, line for line.
static PositionResult compare_position(float nll_base, float log_rest, const int32_t* ids,
                                       const float* log_probs, int64_t top_k, const float* logits,
                                       int64_t n_vocab, int32_t next, uint8_t* in_top) {
  float max_logit = 0;
  const double lse = log_sum_exp(logits, n_vocab, &max_logit);
  PositionResult r;
  r.nll = lse - logits[next];
  r.nll_base = nll_base;
  int32_t argmax = 0;
  for (int64_t v = 1; v < n_vocab; ++v)
    if (logits[v] > logits[argmax]) argmax = (int32_t)v;
  r.same_top = argmax == ids[0];
  memset(in_top, 0, (size_t)n_vocab);
  double kl = 0;
  for (int64_t i = 0; i < top_k; ++i) {
    const int32_t id = ids[i];
    in_top[id] = 1;
    const double lp = log_probs[i], lq = (float)(logits[id] - lse);
    kl += exp(lp) * (lp - lq);
  }
  double rest = 0;
  for (int64_t v = 0; v < n_vocab; ++v)
    if (!in_top[v]) rest += exp((double)logits[v] - max_logit);
  if (isfinite(log_rest)) {
    const double lq_rest = rest > 0 ? (double)(float)(log(rest) + max_logit - lse) : log(DBL_MIN);
    kl += exp((double)log_rest) * ((double)log_rest - lq_rest);
  }
  r.kl = kl;
  return r;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// kl_summarize + print_kl_summary of hearth, same statistics and labels.
static void summarize(const PositionResult* r, int64_t n) {
  double nll = 0, nll2 = 0, nll_base = 0, d = 0, d2 = 0, kl = 0, kl2 = 0, same = 0;
  double* kls = malloc(sizeof(double) * (size_t)n);
  if (!kls) die("out of memory", NULL);
  for (int64_t i = 0; i < n; ++i) {
    nll += r[i].nll;
    nll2 += r[i].nll * r[i].nll;
    nll_base += r[i].nll_base;
    d += r[i].nll - r[i].nll_base;
    d2 += (r[i].nll - r[i].nll_base) * (r[i].nll - r[i].nll_base);
    kl += r[i].kl;
    kl2 += r[i].kl * r[i].kl;
    same += r[i].same_top;
    kls[i] = r[i].kl;
  }
  const double dn = (double)n;
#define STD_ERR(sum, sum2) \
  (n < 2 ? 0.0 : sqrt(fmax((sum2) / dn - ((sum) / dn) * ((sum) / dn), 0.0) / (dn - 1)))
  const double ppl = exp(nll / dn);
  const double ratio = exp(d / dn);
  const double same_top = same / dn;
  qsort(kls, (size_t)n, sizeof(double), cmp_double);
#define QUANTILE(q) kls[(size_t)llround((q) * (dn - 1))]
  printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, ppl * STD_ERR(nll, nll2));
  printf("\n====== Perplexity statistics (%lld tokens) ======\n", (long long)n);
  printf("Mean PPL(Q)               : %10.6f\n", ppl);
  printf("Mean PPL(base)            : %10.6f\n", exp(nll_base / dn));
  printf("Mean PPL(Q)/PPL(base)     : %10.6f +/- %.6f\n", ratio, ratio * STD_ERR(d, d2));
  printf("\n====== KL divergence statistics ======\n");
  printf("Mean    KLD: %10.6f +/- %.6f\n", kl / dn, STD_ERR(kl, kl2));
  printf("Maximum KLD: %10.6f\n", kls[n - 1]);
  printf("99.9%%   KLD: %10.6f\n", QUANTILE(0.999));
  printf("99.0%%   KLD: %10.6f\n", QUANTILE(0.99));
  printf("Median  KLD: %10.6f\n", QUANTILE(0.5));
  printf("Minimum KLD: %10.6f\n", kls[0]);
  printf("Same top p : %6.3f +/- %.3f %%\n", 100 * same_top,
         n > 1 ? 100 * sqrt(same_top * (1 - same_top) / (dn - 1)) : 0.0);
#undef QUANTILE
#undef STD_ERR
  free(kls);
}

int main(int argc, char** argv) {
  const char *model_path = NULL, *base_path = NULL;
  int threads = 1;
  enum ggml_type kv_type = GGML_TYPE_F32;
  for (int i = 1; i < argc; ++i) {
    if ((!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) && i + 1 < argc)
      threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--kv-type") && i + 1 < argc) {
      ++i;
      if (!strcmp(argv[i], "f32"))
        kv_type = GGML_TYPE_F32;
      else if (!strcmp(argv[i], "f16"))
        kv_type = GGML_TYPE_F16;
      else
        die("--kv-type must be f32 or f16, got ", argv[i]);
    } else if (!strcmp(argv[i], "-v"))
      verbose = 1;
    else if (argv[i][0] == '-')
      die("unknown option ", argv[i]);
    else if (!model_path)
      model_path = argv[i];
    else if (!base_path)
      base_path = argv[i];
    else
      die("too many arguments: ", argv[i]);
  }
  if (!model_path || !base_path || threads < 1) {
    fprintf(stderr, "usage: llamacpp_kl MODEL.gguf BASE [-t THREADS] [--kv-type f32|f16] [-v]\n");
    return 2;
  }

  // The base file: header, tokens; its size must be what the header implies.
  FILE* f = fopen(base_path, "rb");
  if (!f) die("cannot read KL base file ", base_path);
  char magic[8];
  read_exact(f, magic, 8, base_path);
  if (memcmp(magic, "HRTHKLB1", 8) != 0)
    die("not a hearth KL base file (hearth perplexity --kl-base F --save-logits): ", base_path);
  BaseShape s;
  read_exact(f, &s, sizeof s, base_path);
  const int64_t scored = s.ctx - 1 - s.first_scored;
  if (s.n_vocab < 1 || s.n_vocab > (1 << 24) || s.ctx < 2 || s.n_chunks < 1 ||
      s.ctx * s.n_chunks > ((int64_t)1 << 31) || s.first_scored < 0 || scored < 1 || s.top_k < 1 ||
      s.top_k > s.n_vocab)
    die("KL base header is corrupt: ", base_path);
  const int64_t pos_bytes = 8 + 8 * s.top_k;
  const int64_t expected = 8 + 5 * 8 + s.n_chunks * s.ctx * 4 + s.n_chunks * scored * pos_bytes;
  fseek(f, 0, SEEK_END);
  if (ftell(f) != expected) die("KL base file size differs from its header's: ", base_path);
  fseek(f, 8 + 5 * 8, SEEK_SET);
  int32_t* tokens = malloc((size_t)(s.n_chunks * s.ctx) * 4);
  uint8_t* pos_buf = malloc((size_t)(scored * pos_bytes));
  uint8_t* in_top = malloc((size_t)s.n_vocab);
  PositionResult* results = malloc(sizeof(PositionResult) * (size_t)(s.n_chunks * scored));
  if (!tokens || !pos_buf || !in_top || !results) die("out of memory", NULL);
  read_exact(f, tokens, (size_t)(s.n_chunks * s.ctx) * 4, base_path);

  llama_log_set(log_filter, NULL);
  llama_backend_init();
  // The CPU backends are separate libraries next to libllama (GGML_BACKEND_DL builds).
  Dl_info info;
  if (dladdr((void*)llama_backend_init, &info) && info.dli_fname) {
    char* dir = strdup(info.dli_fname);
    ggml_backend_load_all_from_path(dirname(dir));
    free(dir);
  } else {
    ggml_backend_load_all();
  }
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  struct llama_model* model = llama_model_load_from_file(model_path, mp);
  if (!model) die("cannot load model ", model_path);
  const struct llama_vocab* vocab = llama_model_get_vocab(model);
  const int64_t n_vocab = llama_vocab_n_tokens(vocab);
  if (n_vocab != s.n_vocab) {
    fprintf(stderr,
            "llamacpp_kl: %s has a vocabulary of %lld tokens, the base %s of %lld: the logits "
            "cannot be compared position by position (pad or convert the GGUF to the base's "
            "vocabulary size)\n",
            model_path, (long long)n_vocab, base_path, (long long)s.n_vocab);
    return 1;
  }
  for (int64_t i = 0; i < s.n_chunks * s.ctx; ++i)
    if (tokens[i] < 0 || tokens[i] >= n_vocab)
      die("a token of the base is outside the vocabulary", NULL);

  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)s.ctx;
  cp.n_batch = (uint32_t)s.ctx;
  cp.n_ubatch = (uint32_t)s.ctx;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.type_k = kv_type;
  cp.type_v = kv_type;
  cp.no_perf = true;
  struct llama_context* lctx = llama_init_from_model(model, cp);
  if (!lctx) die("cannot create a context for ", model_path);
  fprintf(stderr, "llamacpp_kl: %s, %lld params, %.2f MB; %lld chunks of %lld, top-%lld base\n",
          model_path, (long long)llama_model_n_params(model), llama_model_size(model) / 1e6,
          (long long)s.n_chunks, (long long)s.ctx, (long long)s.top_k);

  struct llama_batch batch = llama_batch_init((int32_t)s.ctx, 0, 1);
  int64_t count = 0;
  for (int64_t c = 0; c < s.n_chunks; ++c) {
    const int32_t* chunk = tokens + c * s.ctx;
    llama_memory_clear(llama_get_memory(lctx), true);
    batch.n_tokens = (int32_t)s.ctx;
    for (int64_t i = 0; i < s.ctx; ++i) {
      batch.token[i] = chunk[i];
      batch.pos[i] = (llama_pos)i;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    if (llama_decode(lctx, batch) != 0) die("llama_decode failed on a chunk", NULL);
    read_exact(f, pos_buf, (size_t)(scored * pos_bytes), base_path);
    for (int64_t i = s.first_scored; i < s.ctx - 1; ++i) {
      const uint8_t* p = pos_buf + (i - s.first_scored) * pos_bytes;
      float head[2];
      memcpy(head, p, 8);
      const int32_t* ids = (const int32_t*)(p + 8);
      const float* log_probs = (const float*)(p + 8 + 4 * s.top_k);
      for (int64_t k = 0; k < s.top_k; ++k)
        if (ids[k] < 0 || ids[k] >= n_vocab)
          die("a top-k id of the base is outside the vocabulary", NULL);
      const float* row = llama_get_logits_ith(lctx, (int32_t)i);
      if (!row) die("no logits from llama.cpp", NULL);
      results[count++] = compare_position(head[0], head[1], ids, log_probs, s.top_k, row, n_vocab,
                                          chunk[i + 1], in_top);
    }
    double nll = 0;
    for (int64_t k = 0; k < count; ++k) nll += results[k].nll;
    printf("[%lld]%.4f,", (long long)(c + 1), exp(nll / (double)count));
    fflush(stdout);
  }
  summarize(results, count);

  llama_batch_free(batch);
  llama_free(lctx);
  llama_model_free(model);
  llama_backend_free();
  fclose(f);
  free(tokens);
  free(pos_buf);
  free(in_top);
  free(results);
  return 0;
}
