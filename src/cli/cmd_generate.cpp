// `hearth generate`: generate from token ids (and from text once a tokenizer is present).
// --json prints one line: {"tokens": [...], "text": ..., "finish_reason": ..., "timings": {...}}.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/text_io.h"
#include "core/error.h"
#include "loader/config.h"
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
  GenerateParams params;
  params.max_tokens = o.n_predict;
  params.ignore_eos = o.ignore_eos;
  params.sampling = make_sampling_params(o.sampling, sampling_defaults(config));
  params.sampling.validate(model->info().n_vocab);

  auto state = model->new_sequence();
  StreamPrinter printer(codec, !o.json);
  GenerateResult result = generate(*model, *state, prompt, params, [&](int32_t token) {
    printer.push(token);
    return true;
  });
  const std::string text = codec.decode(result.tokens);
  const auto& t = result.timings;
  if (o.json) {
    nlohmann::json out;
    out["tokens"] = result.tokens;
    out["text"] = text;
    out["finish_reason"] = result.finish_reason;
    out["timings"] = {{"prompt_tokens", t.prompt_tokens},
                      {"prompt_ms", t.prompt_ms},
                      {"prompt_tokens_per_s", t.prompt_tokens_per_s()},
                      {"generated_tokens", t.generated_tokens},
                      {"generate_ms", t.generate_ms},
                      {"generate_tokens_per_s", t.generate_tokens_per_s()}};
    std::printf("%s\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    printer.finish();
    std::fprintf(stderr,
                 "\nprompt: %lld tokens, %.1f ms (%.1f t/s) | generated: %lld tokens, %.2f t/s\n",
                 (long long)t.prompt_tokens, t.prompt_ms, t.prompt_tokens_per_s(),
                 (long long)t.generated_tokens, t.generate_tokens_per_s());
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
