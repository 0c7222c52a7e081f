// `hearth tokenize` and `hearth detokenize`: thin wrappers over hearth::Tokenizer for scripts and
// debugging. tokenize prints one JSON array of ids on one line; detokenize prints the decoded
// text exactly, with no added newline.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace hearth::cli {
namespace {

struct TokenizeOptions {
  std::string model_dir;
  bool add_special = false;
  std::string text;
};

CommandRegistration tokenize_command(
    "tokenize", "print the token ids of TEXT as a JSON array", [](CLI::App& sub) {
      auto opt = std::make_shared<TokenizeOptions>();
      sub.add_option("-m,--model", opt->model_dir, "model directory (with tokenizer.json)")
          ->required();
      sub.add_flag("--add-special", opt->add_special,
                   "add special tokens (BOS/EOS) as the post-processor does");
      sub.add_option("text", opt->text, "text to tokenize")->required();
      return CommandRun([opt] {
        auto tokenizer = Tokenizer::load(resolve_model_dir(opt->model_dir));
        auto ids = tokenizer.encode(opt->text, opt->add_special);
        std::string out = "[";
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i) out += ',';
          out += std::to_string(ids[i]);
        }
        out += "]\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
        return 0;
      });
    });

struct DetokenizeOptions {
  std::string model_dir;
  bool skip_special = false;
  std::string ids;
};

CommandRegistration detokenize_command(
    "detokenize", "print the text of comma-separated token ids", [](CLI::App& sub) {
      auto opt = std::make_shared<DetokenizeOptions>();
      sub.add_option("-m,--model", opt->model_dir, "model directory (with tokenizer.json)")
          ->required();
      sub.add_flag("--skip-special", opt->skip_special, "leave special tokens out");
      sub.add_option("ids", opt->ids, "ids, e.g. 1,2,3")->required();
      return CommandRun([opt] {
        std::vector<int32_t> ids;
        std::string cur;
        auto take = [&] {
          if (cur.empty()) return;
          size_t used = 0;
          long long v = 0;
          try {
            v = std::stoll(cur, &used);
          } catch (const std::exception&) {
            used = 0;
          }
          if (used != cur.size() || v < 0 || v > INT32_MAX)
            fail("ids: {:?} is not a token id", cur);
          ids.push_back(static_cast<int32_t>(v));
          cur.clear();
        };
        for (char c : opt->ids) {
          if (c == ',' || c == ' ' || c == '[' || c == ']' || c == '\n') {
            take();
          } else {
            cur += c;
          }
        }
        take();
        auto tokenizer = Tokenizer::load(resolve_model_dir(opt->model_dir));
        std::string text = tokenizer.decode(ids, opt->skip_special);
        std::fwrite(text.data(), 1, text.size(), stdout);
        return 0;
      });
    });

}  // namespace
}  // namespace hearth::cli
