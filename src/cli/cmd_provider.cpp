// `hearth provider pi|qwen-code [-m DIR] [--url URL] [--ctx N] [--max-tokens N]
// [--api-key-env NAME] [--env]`: prints the configuration a coding agent needs to use a running
// `hearth serve` as its OpenAI-compatible provider, read from the model folder without loading
// weights:
//   pi         the "providers" object of ~/.pi/agent/models.json
//   qwen-code  ~/.qwen/settings.json (modelProviders, the selected auth type and model), or with
//              --env the OPENAI_* environment variables
// The model id is the one /v1/models lists for that folder (server::model_id_for); the context is
// --ctx (give the same as `hearth serve --ctx`) or config.json's max_position_embeddings; thinking
// support comes from the chat template (a <think> block, an enable_thinking or reasoning_effort
// switch). docs/agents.md says where each file goes and why these values.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/template_source.h"
#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"
#include "loader/config.h"
#include "server/server.h"

namespace hearth::cli {
namespace {

using ojson = nlohmann::ordered_json;

// Agents send max_tokens with every request and hearth refuses a request whose prompt plus
// max_tokens exceeds the context, so the default leaves three quarters of the context to the
// prompt, and at most pi's default compaction reserve (16384), past which agents compact anyway.
constexpr int64_t kMaxTokensCap = 16384;

struct ProviderOptions {
  std::string agent;
  std::string model_dir;
  std::string url = "http://127.0.0.1:8080";
  int64_t ctx = 0;
  int64_t max_tokens = 0;
  std::string api_key_env = "HEARTH_API_KEY";
  bool env = false;
};

struct ServedModel {
  std::string id;
  int64_t context = 0;
  int64_t max_tokens = 0;
  bool reasoning = false;         // the template has a think block or a reasoning switch
  bool enable_thinking = false;   // ... switched by chat_template_kwargs.enable_thinking
  bool reasoning_effort = false;  // ... switched by reasoning_effort
};

ServedModel describe_model(const ProviderOptions& o) {
  ServedModel m;
  const std::string dir = resolve_model_dir(o.model_dir);
  m.id = server::model_id_for(dir);
  const ModelConfig config = ModelConfig::load(dir);
  m.context = o.ctx > 0 ? o.ctx
                        : config.get_int_in_or("max_position_embeddings", 2048, 1, INT32_MAX,
                                               "positions are int32");
  m.max_tokens =
      o.max_tokens > 0 ? o.max_tokens : std::clamp<int64_t>(m.context / 4, 1, kMaxTokensCap);
  if (m.max_tokens >= m.context)
    fail("--max-tokens {} leaves no room for a prompt in a context of {} tokens", m.max_tokens,
         m.context);
  const chat::TemplateSource src = chat::load_template_source(dir);
  if (!src.template_text)
    fail(
        "{}: the model has no chat template (chat_template.jinja or tokenizer_config.json "
        "chat_template), and coding agents need /v1/chat/completions, which renders one",
        dir);
  const std::string& t = *src.template_text;
  m.enable_thinking = t.find("enable_thinking") != std::string::npos;
  m.reasoning_effort = t.find("reasoning_effort") != std::string::npos;
  m.reasoning = m.enable_thinking || m.reasoning_effort || t.find("<think>") != std::string::npos;
  return m;
}

// "http://host:port", "http://host:port/" and "http://host:port/v1" all give ".../v1".
std::string api_base(std::string url) {
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0)
    fail("--url {}: expected http://HOST:PORT (where `hearth serve` listens)", url);
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  return url + "/v1";
}

void check_env_name(const std::string& name) {
  const auto ok_char = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  };
  if (name.empty() || (name[0] >= '0' && name[0] <= '9') ||
      !std::all_of(name.begin(), name.end(), ok_char))
    fail("--api-key-env '{}': expected an environment variable name (letters, digits, _)", name);
}

// pi: a provider of the openai-completions kind. pi sends `max_completion_tokens`
// (min(maxTokens, 32000)), `stream_options.include_usage`, and the thinking switch named by
// compat; "apiKey" names an environment variable and is sent as is when that is unset.
ojson pi_models_json(const ServedModel& m, const std::string& base, const std::string& key_env) {
  const bool effort = m.reasoning_effort && !m.enable_thinking;
  ojson compat = {{"supportsDeveloperRole", false},
                  {"supportsStore", false},
                  {"supportsReasoningEffort", effort}};
  if (m.enable_thinking) compat["thinkingFormat"] = "qwen-chat-template";
  ojson model = {{"id", m.id},
                 {"name", m.id + " (hearth)"},
                 {"reasoning", m.reasoning},
                 {"input", {"text"}},
                 {"contextWindow", m.context},
                 {"maxTokens", m.max_tokens},
                 {"cost", {{"input", 0}, {"output", 0}, {"cacheRead", 0}, {"cacheWrite", 0}}}};
  // hearth takes reasoning_effort none..high; pi's top level is xhigh.
  if (effort) model["thinkingLevelMap"] = {{"xhigh", "high"}};
  return {{"providers",
           {{"hearth",
             {{"baseUrl", base},
              {"api", "openai-completions"},
              {"apiKey", key_env},
              {"compat", compat},
              {"models", ojson::array({model})}}}}}};
}

// Qwen Code: an "openai" model provider selected at start. samplingParams goes to the server as
// is (only max_tokens here, so the model's generation_config.json sets the sampling); Qwen Code
// refuses to start without a key, so "env" gives the variable a placeholder that a key in the
// real environment overrides (a server without --api-key takes any key).
ojson qwen_settings_json(const ServedModel& m, const std::string& base,
                         const std::string& key_env) {
  ojson generation = {{"contextWindowSize", m.context},
                      {"samplingParams", {{"max_tokens", m.max_tokens}}}};
  if (m.enable_thinking)
    generation["extra_body"] = {{"chat_template_kwargs", {{"enable_thinking", true}}}};
  ojson provider = {{"id", m.id},
                    {"name", m.id + " (hearth)"},
                    {"description", "served by hearth at " + base},
                    {"baseUrl", base},
                    {"envKey", key_env},
                    {"generationConfig", generation}};
  return {{"modelProviders", {{"openai", ojson::array({provider})}}},
          {"env", {{key_env, "none"}}},
          {"security", {{"auth", {{"selectedType", "openai"}}}}},
          {"model", {{"name", m.id}}}};
}

// A value for a POSIX shell: single-quoted, a quote inside written as '\''.
std::string shell_quote(const std::string& v) {
  std::string out = "'";
  for (char c : v) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// The environment form: no context window (settings.json only), max tokens through
// QWEN_CODE_MAX_OUTPUT_TOKENS.
std::string qwen_env(const ServedModel& m, const std::string& base, const std::string& key_env) {
  return fmt::format(
      "# Qwen Code on hearth serve; its context window ({} tokens) can be set in settings.json "
      "only\n"
      "export OPENAI_BASE_URL={}\n"
      "export OPENAI_MODEL={}\n"
      "export OPENAI_API_KEY=\"${{{}:-none}}\"\n"
      "export QWEN_CODE_MAX_OUTPUT_TOKENS={}\n",
      m.context, shell_quote(base), shell_quote(m.id), key_env, m.max_tokens);
}

// Folder names need not be UTF-8; JSON must be.
std::string json_text(const ojson& j) {
  return j.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

int run_provider(const ProviderOptions& o) {
  if (o.ctx < 0) fail("--ctx must be >= 1 (0: the model's), got {}", o.ctx);
  if (o.max_tokens < 0)
    fail("--max-tokens must be >= 1 (0: a quarter of the context), got {}", o.max_tokens);
  if (o.env && o.agent != "qwen-code") fail("--env is for qwen-code (pi reads only models.json)");
  check_env_name(o.api_key_env);
  const std::string base = api_base(o.url);
  const ServedModel m = describe_model(o);
  std::string out;
  if (o.agent == "pi")
    out = json_text(pi_models_json(m, base, o.api_key_env));
  else if (o.env)
    out = qwen_env(m, base, o.api_key_env);
  else
    out = json_text(qwen_settings_json(m, base, o.api_key_env));
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

CommandRegistration provider_command(
    "provider", "print a coding agent's provider configuration for a running hearth serve",
    [](CLI::App& sub) {
      auto o = std::make_shared<ProviderOptions>();
      sub.add_option("agent", o->agent, "pi (models.json) or qwen-code (settings.json)")
          ->required()
          ->check(CLI::IsMember({"pi", "qwen-code"}));
      sub.add_option("-m,--model", o->model_dir,
                     "the model folder `hearth serve -m` is given (default: as hearth serve)");
      sub.add_option("--url", o->url, "where hearth serve listens")->capture_default_str();
      sub.add_option("-c,--ctx", o->ctx,
                     "the context `hearth serve --ctx` is given (default: the model's)");
      sub.add_option("--max-tokens", o->max_tokens,
                     "largest reply the agent asks for (default: a quarter of the context, at "
                     "most 16384)");
      sub.add_option("--api-key-env", o->api_key_env,
                     "environment variable holding the server's API key")
          ->capture_default_str();
      sub.add_flag("--env", o->env, "qwen-code: print shell exports instead of settings.json");
      return [o] { return run_provider(*o); };
    });

}  // namespace
}  // namespace hearth::cli
