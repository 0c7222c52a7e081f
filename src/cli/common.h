// Helpers shared by the CLI subcommands: option groups, token lists, model resolution.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace hearth::cli {

struct ModelOptions {
  std::string dir;
  std::string device = "cpu";
  int threads = 0;
  bool no_mmap = false;
  bool gdn_recurrent_prefill = false;  // LoadOptions::gdn_recurrent_prefill (`hearth bench`)
  bool deterministic = false;          // LoadOptions::deterministic
  int tensor_parallel = 1;             // LoadOptions::tensor_parallel
};

// -m/--model, --device, --threads, --no-mmap, --deterministic, --tensor-parallel (-tp).
// With `models`, -m may be repeated and its values go there instead (`hearth serve`).
void add_model_options(CLI::App& app, ModelOptions& options,
                       std::vector<std::string>* models = nullptr);
// Sets the thread count and loads the model (the bundled default when -m is absent).
std::unique_ptr<Model> load_model_from(ModelOptions& options);
// The directory to load: `dir`, else HEARTH_MODEL, else the bundled default. A value that is not
// an existing path but reads ORG/NAME[:REVISION] is that model's snapshot in the Hugging Face
// cache (no network); one not cached fails suggesting `hearth pull`.
std::string resolve_model_dir(const std::string& dir);
// For commands that run an Engine: sets the thread count and returns the options the model
// flags give (the model directory resolved as load_model_from does).
EngineOptions engine_options_from(ModelOptions& options);

// The command line with the multi-letter short option -tp (-tp N, -tp=N) spelled
// --tensor-parallel, which CLI11 2.1 cannot name; arguments after "--" are left alone.
std::vector<std::string> expand_short_aliases(int argc, char** argv);

// "1,2,3" (spaces allowed) → ids; throws naming the bad item.
std::vector<int32_t> parse_token_list(const std::string& text, const char* option);

// --temperature, --top-k, --top-p, --min-p, --repeat-penalty, --presence-penalty,
// --frequency-penalty, --repeat-last-n, --logit-bias, --seed. Values given on the command line
// override the model's generation_config.json defaults.
struct SamplingOptions {
  SamplingOverrides fields;             // bound to the flags; logit_bias filled from the text
  std::vector<std::string> logit_bias;  // "ID:BIAS" or "ID=BIAS"
};
void add_sampling_options(CLI::App& app, SamplingOptions& options);
SamplingParams make_sampling_params(const SamplingOptions& options, SamplingParams defaults);

}  // namespace hearth::cli
