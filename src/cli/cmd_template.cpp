// `hearth template -m DIR --messages FILE.json [--tools FILE.json] [--kwargs JSON]
// [--no-generation-prompt]`: renders the model's chat template exactly as transformers'
// apply_chat_template(tokenize=False) would, and prints it with no added newline.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "chat/template.h"
#include "chat/template_source.h"
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"

namespace hearth::cli {
namespace {

nlohmann::ordered_json read_json_file(const std::string& path, const char* option) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{} {}: cannot open file", option, path);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::ordered_json::parse(ss.str());
  } catch (const std::exception& e) {
    fail("{} {}: invalid JSON: {}", option, path, e.what());
  }
}

struct TemplateOptions {
  std::string model_dir;
  std::string messages_file;
  std::string tools_file;
  std::string kwargs_json;
  bool no_generation_prompt = false;
};

int run_template(const TemplateOptions& o) {
  chat::TemplateSource src = chat::load_template_source(o.model_dir);
  if (!src.template_text)
    fail(
        "{}: the model has no chat template (no chat_template.jinja or tokenizer_config.json "
        "chat_template)",
        o.model_dir);
  chat::ChatTemplate tmpl = chat::ChatTemplate::parse(*src.template_text);

  chat::ChatInputs in;
  nlohmann::ordered_json messages = read_json_file(o.messages_file, "--messages");
  if (messages.is_object() && messages.contains("messages")) {  // a request body is accepted too
    if (messages.contains("tools")) in.tools = messages["tools"];
    if (messages.contains("documents")) in.documents = messages["documents"];
    messages = messages["messages"];
  }
  if (!messages.is_array())
    fail("--messages {}: expected a JSON array of messages", o.messages_file);
  in.messages = messages;
  if (!o.tools_file.empty()) in.tools = read_json_file(o.tools_file, "--tools");
  if (!o.kwargs_json.empty()) {
    try {
      in.kwargs = nlohmann::ordered_json::parse(o.kwargs_json);
    } catch (const std::exception& e) {
      fail("--kwargs: invalid JSON: {}", e.what());
    }
    if (!in.kwargs.is_object()) fail("--kwargs: expected a JSON object");
  }
  in.add_generation_prompt = !o.no_generation_prompt;
  in.special_tokens = src.special_tokens;
  std::string out = chat::render_chat(tmpl, in);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

CommandRegistration template_command(
    "template", "render a chat template for a conversation", [](CLI::App& sub) {
      auto o = std::make_shared<TemplateOptions>();
      sub.add_option("-m,--model", o->model_dir,
                     "model folder (tokenizer_config.json or chat_template.jinja)")
          ->required();
      sub.add_option("--messages", o->messages_file, "JSON file: an array of messages")->required();
      sub.add_option("--tools", o->tools_file, "JSON file: an array of tool schemas");
      sub.add_option("--kwargs", o->kwargs_json,
                     "JSON object of extra template variables, e.g. {\"enable_thinking\": false}");
      sub.add_flag("--no-generation-prompt", o->no_generation_prompt,
                   "do not append the assistant turn header");
      return [o]() {
        o->model_dir = resolve_model_dir(o->model_dir);  // ORG/NAME: from the Hugging Face cache
        return run_template(*o);
      };
    });

}  // namespace
}  // namespace hearth::cli
