// `hearth generate`: generate from token ids (and from text once a tokenizer is present).
// --json prints one line: {"tokens": [...], "text": ..., "finish_reason": ..., "timings": {...}}.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "cli/text_io.h"
#include "core/error.h"
#include "loader/config.h"
#include "runtime/engine.h"
#include "runtime/generate.h"

namespace hearth::cli {

namespace {

struct GenerateOptions {
  ModelOptions model;
  SamplingOptions sampling;
  std::string prompt_tokens;
  std::optional<std::string> prompt;
  bool chat = false;
  int64_t n_predict = 128;
  bool ignore_eos = false;
  bool json = false;
};

int run_generate(GenerateOptions& o) {
  auto model = load_model_from(o.model);
  const ModelConfig config = ModelConfig::load(o.model.dir);
  TextCodec codec(o.model.dir);
  std::vector<int32_t> prompt;
  if (!o.prompt_tokens.empty()) {
    if (o.prompt) fail("give either --prompt-tokens or -p/--prompt, not both");
    prompt = parse_token_list(o.prompt_tokens, "--prompt-tokens");
  } else if (o.prompt) {
    prompt = o.chat ? codec.encode_chat(*o.prompt) : codec.encode(*o.prompt);
  } else {
    prompt = codec.default_prompt();
  }
  for (int32_t t : prompt)
    if (t >= model->info().n_vocab)
      fail("--prompt-tokens: token id {} is out of range [0, {})", t, model->info().n_vocab);
  const int64_t n_ctx = model->info().n_ctx_train > 0 ? model->info().n_ctx_train : 4096;
  if (int64_t(prompt.size()) > n_ctx)
    fail("the prompt has {} tokens, more than the model's context of {}", prompt.size(), n_ctx);
  GenerationRequest request;
  request.prompt = prompt;
  // As llama.cpp does, generation stops at the end of the context rather than refusing.
  request.max_tokens = std::min<int64_t>(o.n_predict, n_ctx - int64_t(prompt.size()));
  request.ignore_eos = o.ignore_eos;
  request.sampling = make_sampling_params(o.sampling, sampling_defaults(config));
  request.sampling.validate(model->info().n_vocab);

  // The server's engine runs this request too (one generation loop); the text is printed here
  // from the tokens, as they come.
  EngineOptions eo;
  eo.device = o.model.device;
  eo.cache_bytes = 0;
  Engine engine(std::move(model), nullptr, config, eo);
  StreamPrinter printer(codec, !o.json);
  ProgressLine prefill("prefill", "tokens", 1);  // a long prompt's progress, on a terminal
  const GenerationResult result = engine.generate(
      request,
      [&](const GenerationDelta& delta) {
        prefill.erase();
        for (int32_t token : delta.tokens) printer.push(token);
      },
      [&](int64_t done, int64_t total) { prefill.update(done, total); });
  prefill.erase();
  if (result.finish_reason == "error") fail("{}", result.error);
  const std::string text = codec.decode(result.tokens);
  const GenerationTimings& t = result.timings;
  const int64_t n_gen = int64_t(result.tokens.size());
  const double prompt_per_s = t.prefill_ms > 0 ? double(prompt.size()) * 1e3 / t.prefill_ms : 0;
  const double gen_per_s = t.decode_ms > 0 && n_gen > 1 ? double(n_gen - 1) * 1e3 / t.decode_ms : 0;
  if (o.json) {
    nlohmann::json out;
    out["tokens"] = result.tokens;
    out["text"] = text;
    out["finish_reason"] = result.finish_reason;
    out["timings"] = {{"prompt_tokens", prompt.size()},      {"prompt_ms", t.prefill_ms},
                      {"prompt_tokens_per_s", prompt_per_s}, {"generated_tokens", n_gen},
                      {"generate_ms", t.decode_ms},          {"generate_tokens_per_s", gen_per_s}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    printer.finish();
    std::fprintf(stderr,
                 "\nprompt: %lld tokens, %.1f ms (%.1f t/s) | generated: %lld tokens, %.2f t/s\n",
                 (long long)prompt.size(), t.prefill_ms, prompt_per_s, (long long)n_gen, gen_per_s);
  }
  return 0;
}

CommandRegistration generate_command(
    "generate", "generate text or tokens from a prompt", [](CLI::App& sub) {
      auto o = std::make_shared<GenerateOptions>();
      add_model_options(sub, o->model);
      add_sampling_options(sub, o->sampling);
      sub.add_option("--prompt-tokens", o->prompt_tokens, "prompt as token ids: 1,2,3");
      sub.add_option("-p,--prompt", o->prompt, "prompt text");
      sub.add_flag("--chat", o->chat,
                   "render the prompt as a user message through the chat template");
      sub.add_option("-n,--n-predict,--max-tokens", o->n_predict, "tokens to generate")
          ->capture_default_str();
      sub.add_flag("--ignore-eos", o->ignore_eos, "do not stop at end-of-sequence tokens");
      sub.add_flag("--json", o->json, "print one JSON line with tokens, text and timings");
      return [o] { return run_generate(*o); };
    });

}  // namespace
}  // namespace hearth::cli
