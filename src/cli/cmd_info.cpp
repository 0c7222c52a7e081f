// `hearth info`: what a checkpoint is — architecture, parameters, bytes, dtypes, context length.
#include <cstdio>

#include "cli/command.h"
#include "cli/common.h"

namespace hearth::cli {

namespace {

int run_info(ModelOptions& o) {
  auto model = load_model_from(o);
  const ModelInfo& i = model->info();
  std::printf("model:          %s\n", o.dir.c_str());
  std::printf("model_type:     %s\n", i.model_type.c_str());
  std::printf("architecture:   %s\n", i.architecture.c_str());
  std::printf("parameters:     %lld (%.3f B)\n", (long long)i.n_params, double(i.n_params) / 1e9);
  std::printf("weight bytes:   %zu (%.2f GB)\n", i.weight_bytes, double(i.weight_bytes) / 1e9);
  std::printf("dtypes:         %s\n", i.dtypes.c_str());
  std::printf("formats:        %s\n", i.formats.c_str());
  std::printf("decode reads:   %.2f MB of weights per token\n", double(i.decode_bytes) / 1e6);
  std::printf("layers:         %lld\n", (long long)i.n_layer);
  std::printf("hidden size:    %lld\n", (long long)i.n_embd);
  std::printf("vocabulary:     %lld\n", (long long)i.n_vocab);
  std::printf("context length: %lld\n", (long long)i.n_ctx_train);
  std::string eos;
  for (auto id : i.eos_token_ids) eos += (eos.empty() ? "" : ", ") + std::to_string(id);
  std::printf("eos ids:        %s\n", eos.empty() ? "(none)" : eos.c_str());
  return 0;
}

CommandRegistration info_command("info", "describe a model checkpoint", [](CLI::App& sub) {
  auto o = std::make_shared<ModelOptions>();
  add_model_options(sub, *o);
  return [o] { return run_info(*o); };
});

}  // namespace
}  // namespace hearth::cli
