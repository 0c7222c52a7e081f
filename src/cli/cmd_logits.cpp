// `hearth logits`: one prefill over --tokens, all rows of logits written as float32 .npy
// [n_tokens, n_vocab] — the form the reference fixtures use.
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "loader/npy.h"

namespace hearth::cli {

namespace {

struct LogitsOptions {
  ModelOptions model;
  std::string tokens;
  std::string output;
};

int run_logits(LogitsOptions& o) {
  auto model = load_model_from(o.model);
  auto ids = parse_token_list(o.tokens, "--tokens");
  if (ids.empty()) fail("--tokens: at least one token id is needed");
  const int64_t n_vocab = model->info().n_vocab;
  for (int32_t t : ids)
    if (t >= n_vocab) fail("--tokens: token id {} is out of range [0, {})", t, n_vocab);
  std::vector<float> logits(ids.size() * size_t(n_vocab));
  auto state = model->new_sequence();
  model->forward(*state, ids, LogitsRows::All, logits.data());
  npy_write_f32(o.output, logits.data(), {int64_t(ids.size()), n_vocab});
  return 0;
}

CommandRegistration logits_command(
    "logits", "write the logits of one prefill as a .npy file", [](CLI::App& sub) {
      auto o = std::make_shared<LogitsOptions>();
      add_model_options(sub, o->model);
      sub.add_option("--tokens", o->tokens, "token ids: 1,2,3")->required();
      sub.add_option("-o,--output", o->output, "output .npy path")->required();
      return [o] { return run_logits(*o); };
    });

}  // namespace
}  // namespace hearth::cli
