// `hearth embed`: text embeddings from the command line. Each text (the arguments, else one per
// line of stdin) is embedded as /v1/embeddings does it (the checkpoint's sentence-transformers
// pooling and normalisation, runtime/embedding.h) and printed as one JSON line:
// {"index": i, "tokens": n, "embedding": [...]}. --similarity prints the cosine similarities of
// the texts instead, a row per text.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {

namespace {

struct EmbedOptions {
  ModelOptions model;
  std::vector<std::string> texts;
  int64_t dimensions = 0;
  bool similarity = false;
};

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0.0;
}

int run_embed(EmbedOptions& o) {
  if (o.dimensions < 0) fail("--dimensions must be >= 1, got {}", o.dimensions);
  if (o.texts.empty()) {
    std::string line;
    while (std::getline(std::cin, line))
      if (!line.empty()) o.texts.push_back(line);
    if (o.texts.empty()) fail("no text to embed: give texts as arguments or lines on stdin");
  }
  EngineOptions eo = engine_options_from(o.model);
  eo.cache_bytes = 0;
  eo.max_running = 1;
  auto engine = Engine::load(eo);
  const Tokenizer* tok = engine->tokenizer();
  if (!tok) fail("{}: this model has no tokenizer.json", eo.model_dir);
  const EmbeddingConfig& config = engine->embedding_config();
  std::vector<std::vector<float>> embeddings;
  for (size_t i = 0; i < o.texts.size(); ++i) {
    const std::vector<int32_t> tokens = tok->encode(o.texts[i], true);
    std::vector<float> v = engine->embed(tokens);
    if (o.dimensions > 0) truncate_embedding(v, o.dimensions, config.normalize);
    if (!o.similarity) {
      nlohmann::json line = {{"index", i}, {"tokens", tokens.size()}, {"embedding", v}};
      std::printf("%s\n", line.dump().c_str());
    }
    embeddings.push_back(std::move(v));
  }
  if (o.similarity) {
    for (size_t i = 0; i < embeddings.size(); ++i) {
      for (size_t j = 0; j < embeddings.size(); ++j)
        std::printf("%s%7.4f", j ? " " : "", cosine(embeddings[i], embeddings[j]));
      std::printf("\n");
    }
  }
  std::fprintf(stderr, "%zu texts, %zu dimensions, %s pooling%s%s\n", embeddings.size(),
               embeddings.empty() ? size_t(0) : embeddings[0].size(), pooling_name(config.pooling),
               config.normalize ? ", normalised" : "",
               config.from_sentence_transformers ? " (sentence-transformers config)" : "");
  return 0;
}

CommandRegistration embed_command(
    "embed", "embed texts (JSON lines, or --similarity)", [](CLI::App& sub) {
      auto o = std::make_shared<EmbedOptions>();
      add_model_options(sub, o->model);
      sub.add_option("texts", o->texts, "texts to embed (default: one per line of stdin)");
      sub.add_option("--dimensions", o->dimensions,
                     "keep the first N values and normalise again (Matryoshka models)");
      sub.add_flag("--similarity", o->similarity,
                   "print the texts' cosine similarities instead of the vectors");
      return [o] { return run_embed(*o); };
    });

}  // namespace
}  // namespace hearth::cli
