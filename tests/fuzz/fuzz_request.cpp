// Fuzz target: an HTTP request body as the server handles it — parsed with the server's nesting
// limit, then read as an OpenAI chat completion, an Anthropic message, an OpenAI Responses request,
// an OpenAI completion and an Ollama chat and generate request (schemas.cpp,
// schemas_anthropic.cpp, schemas_responses.cpp, schemas_ollama.cpp) and, for the chat APIs, taken
// through prepare_chat: the
// real chat templates (Qwen3.5 XML tools, Hermes, Llama 3.1 JSON tools, Mistral) rendered with
// the server's limits, the real Qwen3 tokenizer, tool_choice forcing, the context and sampling
// checks. A model reply is then run through ChatOutput and ResponsesOutput. Everything a client
// sends must end in an ApiError / hearth::Error (a 4xx); any other exception escaping here is a 500
// the client should not get, so it is left to end the run as a finding. A Responses request's
// input items are also listed as GET /v1/responses/{id}/input_items would, with the body's
// "query" string as the query.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "chat/tool_parser.h"
#include "core/json_bounded.h"
#include "fuzz/fuzz_util.h"
#include "loader/config.h"
#include "models/model.h"
#include "runtime/engine.h"
#include "server/chat_pipeline.h"
#include "server/errors.h"
#include "server/http/message.h"
#include "server/responses_input_items.h"
#include "server/responses_output.h"
#include "server/schemas.h"
#include "server/schemas_ollama.h"
#include "server/schemas_responses.h"
#include "server/state.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace hearth;
using namespace hearth::server;

// What prepare_chat needs of a model: its vocabulary size and context. Never run.
class IdleModel final : public Model {
 public:
  explicit IdleModel(int64_t n_vocab) {
    info_.model_type = "qwen3";
    info_.n_vocab = n_vocab;
    info_.n_ctx_train = 4096;
  }
  const ModelInfo& info() const override { return info_; }
  std::unique_ptr<SequenceState> new_sequence() const override {
    fail("the fuzz target's model does not run");
  }
  void forward(SequenceState&, std::span<const int32_t>, LogitsRows, float*) override {
    fail("the fuzz target's model does not run");
  }

 private:
  ModelInfo info_;
};

std::vector<ServedModel> make_models() {
  const auto dir = fuzz::real_tokenizer_dir("qwen3");
  fuzz::read_required(dir / "tokenizer.json", fuzz::kFetchHint);
  auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(dir));
  const nlohmann::json config = {{"model_type", "qwen3"}, {"eos_token_id", 151645}};
  auto engine = std::make_shared<Engine>(std::make_unique<IdleModel>(tok->vocab_size()), tok,
                                         ModelConfig::from_json(config), EngineOptions{});
  std::vector<ServedModel> models;
  for (const char* name : {"qwen3_5", "hermes", "llama3_1_tools", "mistral"}) {
    ServedModel& m = models.emplace_back();
    m.engine = engine;
    m.model_id = "fuzz";
    m.chat_template_source = fuzz::read_required(
        fuzz::source_path(std::string("tests/data/chat/templates/") + name + ".jinja"));
    m.chat_template = chat::ChatTemplate::parse(m.chat_template_source);
    m.tool_format = chat::detect_tool_call_format(m.chat_template_source);
  }
  return models;
}

// One model per chat template, over an engine that never runs.
const std::vector<ServedModel>& models() {
  static const auto all = make_models();
  return all;
}

// The server's options as `hearth serve`'s defaults set them.
const ServerState& server_state() {
  static const ServerState state;
  return state;
}

// What a model might answer: reasoning, then a call in the template's format.
void run_output(const PreparedChat& prepared) {
  ChatOutput out(prepared);
  std::string sse;
  ResponsesOutput items(&sse);
  items.add(out.push("<think>\nchecking</think>\n\n"));
  items.add(out.push(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
      "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}]"));
  items.add(out.finish());
  items.finish("completed");
}

void run_chat(const ServedModel& m, const ChatRequest& r) {
  try {
    const PreparedChat prepared = prepare_chat(server_state(), m, r);
    run_output(prepared);
  } catch (const Error&) {  // ApiError included: a 400 for the client
  }
}

// An Ollama request as its routes prepare it: the template (unless raw), generate's context ids
// before the prompt, num_ctx as the request's context, num_predict.
void run_ollama(const ServedModel& m, const OllamaRequest& r) {
  if (r.empty) return;
  try {
    PreparedChat prepared;
    if (r.raw) {
      prepared.gen.prompt = m.engine->tokenizer()->encode(r.prompt, true);
    } else {
      prepared = prepare_chat(server_state(), m, r.chat, /*for_generation=*/false);
      prepared.gen.prompt.insert(prepared.gen.prompt.begin(), r.context.begin(), r.context.end());
    }
    finish_generation_request(server_state(), m, prepared.gen, std::nullopt, r.chat.sampling,
                              r.num_ctx.value_or(0));
    if (!r.raw) run_output(prepared);
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  models();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ojson body;
  if (parse_json_bounded(std::string_view(reinterpret_cast<const char*>(data), size), body) !=
          JsonParseStatus::Ok ||
      !body.is_object())
    return 0;  // answered 400 before any route runs

  try {
    const ChatRequest r = parse_openai_chat(body);
    for (const auto& m : models()) run_chat(m, r);
  } catch (const Error&) {
  }
  try {
    const ChatRequest r = parse_anthropic_messages(body);
    for (const auto& m : models()) run_chat(m, r);
  } catch (const Error&) {
  }
  try {
    ResponsesRequest r = parse_responses_request(body);
    r.chat.messages = responses_messages(r.input, r.instructions);
    for (const auto& m : models()) run_chat(m, r.chat);
    // Its input items listed, the body's "query" string (if any) as the listing's query.
    StoredResponse stored;
    stored.conversation = r.input.dump();
    responses_store_input(stored, r.input, r.input);
    http::Request get;
    get.target = "/v1/responses/resp_1/input_items?" + body.value("query", std::string());
    responses_items_page(responses_stored_input(stored),
                         parse_responses_items_query(get.query_params()));
  } catch (const Error&) {
  }
  try {
    const OllamaRequest r = parse_ollama_chat(body);
    for (const auto& m : models()) run_ollama(m, r);
  } catch (const Error&) {
  }
  try {
    run_ollama(models().front(), parse_ollama_generate(body));
  } catch (const Error&) {
  }
  try {
    const CompletionRequest r = parse_openai_completion(body);
    const ServedModel& m = models().front();
    GenerationRequest gen;
    gen.prompt = r.prompt_tokens ? *r.prompt_tokens : m.engine->tokenizer()->encode(r.prompt, true);
    if (r.prompt_tokens) m.engine->tokenizer()->decode(gen.prompt, false);
    gen.stop = r.stop;
    gen.logprobs = r.logprobs;
    finish_generation_request(server_state(), m, gen, r.max_tokens, r.sampling);
  } catch (const Error&) {
  }
  return 0;
}
