// Ollama's API: POST /api/chat and /api/generate (NDJSON streams by default, one JSON object a
// line, the last with done: true, done_reason and the timings in nanoseconds; a single object
// with stream: false), GET /api/tags, /api/ps, /api/version, POST /api/show. Requests run through
// the chat pipeline the other APIs use (template, tools, reasoning, sampling, stop strings,
// cancellation when the client goes). Per-token lines are pre-rendered once per wake-up with
// that wake-up's time as created_at (server/sse.h), so a token costs no JSON tree.
// Not served: embeddings (501 until the engine has an embedding path) and model management
// (pull, push, create, copy: 501, the server serves the one model it started with).
#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/json_bounded.h"
#include "server/chat_pipeline.h"
#include "server/http_util.h"
#include "server/routes.h"
#include "server/runner.h"
#include "server/schemas_ollama.h"
#include "server/sse.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

namespace {

using nlohmann::json;

// What /api/version reports: an Ollama release whose API (docs/api.md: think levels, tool calls
// in messages, logprobs) this one follows, so clients that gate features on the version (or ask
// for a recent Ollama) turn them on.
constexpr const char* kOllamaApiVersion = "0.24.0";

int64_t ollama_ns(double ms) { return int64_t(ms * 1e6); }

// The model a request names, loaded (several models: on demand). Ollama's clients always name
// one, and Ollama answers an unknown name with a 404, so even one served model is matched.
ModelRef ollama_model(ServerState& s, const std::string& name) {
  auto not_found = [&] {
    return ApiError(404, fmt::format("model '{}' not found", name), "model");
  };
  if (!s.pool) {
    if (!s.model || !ollama_model_matches(name, s.model->model_id)) throw not_found();
    return ModelRef(s.model);
  }
  for (const ModelEntry& e : s.pool->entries()) {
    if (!ollama_model_matches(name, e.id)) continue;
    try {
      return ModelRef(s.pool->acquire(e));
    } catch (const std::exception& ex) {
      throw ApiError(500, fmt::format("model '{}' failed to load: {}", e.id, ex.what()), "model");
    }
  }
  throw not_found();
}

std::string ollama_now() { return ollama_time(std::chrono::system_clock::now()); }

json ollama_tool_calls_json(const std::vector<chat::ToolCall>& calls, size_t first_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json args = parse_json_or_discarded<json>(calls[i].arguments);  // the parser gives objects
    if (!args.is_object()) args = json::object();
    out.push_back(
        {{"id", random_id("call_")},
         {"function", {{"index", first_index + i}, {"name", calls[i].name}, {"arguments", args}}}});
  }
  return out;
}

json ollama_logprobs_json(const Engine& engine, const std::vector<TokenLogprob>& lps) {
  json out = json::array();
  for (const auto& lp : lps) {
    json e = token_logprob_entry(engine, lp.token, lp.logprob);
    if (!lp.top.empty()) {
      json top = json::array();
      for (auto [id, v] : lp.top) top.push_back(token_logprob_entry(engine, id, v));
      e["top_logprobs"] = top;
    }
    out.push_back(std::move(e));
  }
  return out;
}

// A prepared generation and how its response is shaped.
struct OllamaJob {
  std::shared_ptr<const ModelRef> served;  // held until the answer is complete
  std::shared_ptr<PreparedChat> prepared;
  std::string model;            // as the client named it (Ollama echoes it)
  bool chat = true;             // "message" (chat) or "response" (generate)
  bool parse_output = true;     // reasoning and tool calls split out (not in raw mode)
  bool return_context = false;  // generate: the token ids of prompt and answer
  bool want_logprobs = false;
  Clock::time_point arrival;
};

// One response object: the text fields of a chunk (or of the whole answer).
json ollama_chunk(const OllamaJob& job, const std::string& time, const std::string& content,
                  const std::string& thinking, const json& calls, bool done) {
  json c = {{"model", job.model}, {"created_at", time}, {"done", done}};
  if (job.chat) {
    json msg = {{"role", "assistant"}, {"content", content}};
    if (!thinking.empty()) msg["thinking"] = thinking;
    if (!calls.empty()) msg["tool_calls"] = calls;
    c["message"] = std::move(msg);
  } else {
    c["response"] = content;
    if (!thinking.empty()) c["thinking"] = thinking;
  }
  return c;
}

// done_reason, the timings (nanoseconds) and counts, and generate's context.
void ollama_add_final(const OllamaJob& job, const GenerationResult& r, json& c) {
  const GenerationTimings& t = r.timings;
  c["done_reason"] = r.finish_reason;  // "stop" or "length", as Ollama's
  c["total_duration"] = int64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - job.arrival).count());
  c["load_duration"] = ollama_ns(t.queue_ms);  // Ollama counts the wait for a runner here
  c["prompt_eval_count"] = r.usage.prompt_tokens;
  c["prompt_eval_duration"] = ollama_ns(t.prefill_ms);
  c["eval_count"] = r.usage.completion_tokens;
  c["eval_duration"] = ollama_ns(t.decode_ms);
  if (job.return_context) {
    std::vector<int32_t> context = job.prepared->gen.prompt;
    context.insert(context.end(), r.tokens.begin(), r.tokens.end());
    c["context"] = std::move(context);
  }
}

// The model's text as events: reasoning, content and tool calls, or (raw) all of it as content.
class OllamaOutput {
 public:
  explicit OllamaOutput(const OllamaJob& job) {
    if (job.parse_output) out_.emplace(*job.prepared);
  }
  ChatOutput::Events push(const std::string& text) {
    return out_ ? out_->push(text)
                : ChatOutput::Events{.reasoning = {}, .content = text, .calls = {}};
  }
  ChatOutput::Events finish() { return out_ ? out_->finish() : ChatOutput::Events{}; }

 private:
  std::optional<ChatOutput> out_;
};

// The NDJSON lines of a streamed response, gathered per wake-up and written in one go.
class OllamaLines {
 public:
  OllamaLines(http::BodyWriter& sink, const OllamaJob& job, const Engine& engine)
      : batch_(sink), job_(job), engine_(engine) {}
  bool add(const ChatOutput::Events& ev, const std::vector<TokenLogprob>& lps) {
    if (!stamped_) stamp();
    std::string& buf = batch_.buffer();
    if (job_.want_logprobs && !lps.empty()) {  // one line with the tokens' logprobs
      json c = ollama_chunk(job_, time_, ev.content, ev.reasoning,
                            ollama_tool_calls_json(ev.calls, n_calls_), false);
      c["logprobs"] = ollama_logprobs_json(engine_, lps);
      add_line(c);
    } else {
      if (!ev.reasoning.empty()) thinking_.append(buf, ev.reasoning);
      if (!ev.content.empty()) content_.append(buf, ev.content);
      if (!ev.calls.empty())
        add_line(
            ollama_chunk(job_, time_, "", "", ollama_tool_calls_json(ev.calls, n_calls_), false));
    }
    n_calls_ += ev.calls.size();
    return batch_.ok();
  }
  // After each wake-up's deltas: the next ones get a new created_at.
  bool flush() {
    stamped_ = false;
    return batch_.flush();
  }
  void done(const GenerationResult& r) {
    json c = ollama_chunk(job_, ollama_now(), "", "", json::array(), true);
    ollama_add_final(job_, r, c);
    add_line(c);
  }
  void error(const std::string& message) { add_line(json{{"error", message}}); }

 private:
  void add_line(const json& c) { batch_.add(dump_json(c) + "\n"); }
  void stamp() {
    time_ = ollama_now();
    const std::string slot(SseTextChunk::kSlot);
    content_ = SseTextChunk(ollama_chunk(job_, time_, slot, "", json::array(), false), "", "\n");
    // A thinking line has empty content (chat) or an empty response (generate), as Ollama's.
    json thinking = ollama_chunk(job_, time_, "", "x", json::array(), false);
    (job_.chat ? thinking["message"]["thinking"] : thinking["thinking"]) = slot;
    thinking_ = SseTextChunk(thinking, "", "\n");
    stamped_ = true;
  }
  SseBatch batch_;
  const OllamaJob& job_;
  const Engine& engine_;
  bool stamped_ = false;
  std::string time_;
  SseTextChunk content_, thinking_;
  size_t n_calls_ = 0;
};

void ollama_respond(ServerState& s, const http::Request& req, http::Response& res,
                    std::shared_ptr<const OllamaJob> job, bool stream) {
  if (!stream) {
    Engine& engine = *(*job->served)->engine;
    EngineRequest er(s, engine, job->prepared->gen, job->arrival, /*want_deltas=*/false);
    GenerationResult result = pump(er, &req, {});
    if (const auto failure = result_failure(s, result))
      throw ApiError(failure->status, failure->message);
    OllamaOutput out(*job);
    ChatOutput::Events all = out.push(result.text);  // the parsers give the same for any split
    ChatOutput::Events last = out.finish();
    all.reasoning += last.reasoning;
    all.content += last.content;
    for (auto& c : last.calls) all.calls.push_back(std::move(c));
    json c = ollama_chunk(*job, ollama_now(), all.content, all.reasoning,
                          ollama_tool_calls_json(all.calls, 0), true);
    ollama_add_final(*job, result, c);
    if (job->want_logprobs) c["logprobs"] = ollama_logprobs_json(engine, result.logprobs);
    send_json(res, c);
    return;
  }
  res.set_stream("application/x-ndjson", [&s, job, &req](http::BodyWriter& sink) {
    Engine& engine = *(*job->served)->engine;
    OllamaLines lines(sink, *job, engine);
    EngineRequest er(s, engine, job->prepared->gen, job->arrival);
    OllamaOutput out(*job);
    GenerationResult result = pump(
        er, &req, [&](const GenerationDelta& d) { return lines.add(out.push(d.text), d.logprobs); },
        {}, [&] { return lines.flush(); });
    if (const auto failure = result_failure(s, result)) {
      lines.error(failure->message);
    } else {
      lines.add(out.finish(), {});
      lines.done(result);
    }
    lines.flush();
  });
}

// Ollama's reply to a request without messages or prompt: it loads the model, which is loaded.
json ollama_load_reply(const std::string& model, bool chat) {
  json c = {
      {"model", model}, {"created_at", ollama_now()}, {"done", true}, {"done_reason", "load"}};
  if (chat)
    c["message"] = {{"role", "assistant"}, {"content", ""}};
  else
    c["response"] = "";
  return c;
}

// The context check (num_ctx, at most the server's) and num_predict (at most what is left).
void ollama_limit(const ServerState& s, const ServedModel& m, GenerationRequest& gen,
                  const OllamaRequest& r) {
  finish_generation_request(s, m, gen, std::nullopt, r.chat.sampling, r.num_ctx.value_or(0));
  if (r.num_predict) gen.max_tokens = std::min(gen.max_tokens, *r.num_predict);
}

void ollama_chat(ServerState& s, const ojson& body, const http::Request& req, http::Response& res) {
  auto job = std::make_shared<OllamaJob>();
  job->arrival = Clock::now();
  job->model = parse_ollama_model(body);
  job->served = std::make_shared<const ModelRef>(ollama_model(s, job->model));
  const ServedModel& m = **job->served;
  const OllamaRequest r = parse_ollama_chat(body);
  if (r.empty) return send_json(res, ollama_load_reply(job->model, true));
  job->prepared = std::make_shared<PreparedChat>(prepare_chat(s, m, r.chat, false));
  ollama_limit(s, m, job->prepared->gen, r);
  job->want_logprobs = r.chat.logprobs >= 0;
  ollama_respond(s, req, res, job, r.stream);
}

void ollama_generate(ServerState& s, const ojson& body, const http::Request& req,
                     http::Response& res) {
  auto job = std::make_shared<OllamaJob>();
  job->arrival = Clock::now();
  job->model = parse_ollama_model(body);
  job->served = std::make_shared<const ModelRef>(ollama_model(s, job->model));
  const ServedModel& m = **job->served;
  const OllamaRequest r = parse_ollama_generate(body);
  if (r.empty) return send_json(res, ollama_load_reply(job->model, false));
  job->chat = false;
  if (r.raw) {
    const Tokenizer* tok = m.engine->tokenizer();
    if (!tok) bad_request("this model has no tokenizer", "prompt");
    job->prepared = std::make_shared<PreparedChat>();
    job->prepared->prompt_text = r.prompt;
    job->prepared->gen.prompt = tok->encode(r.prompt, true);  // as /v1/completions
    job->prepared->gen.stop = r.chat.stop;
    job->prepared->gen.logprobs = r.chat.logprobs;
    job->parse_output = false;
  } else {
    if (!m.chat_template)
      bad_request("this model has no chat template: give the whole prompt with raw: true", "raw");
    job->prepared = std::make_shared<PreparedChat>(prepare_chat(s, m, r.chat, false));
    std::vector<int32_t>& prompt = job->prepared->gen.prompt;
    prompt.insert(prompt.begin(), r.context.begin(), r.context.end());
    job->return_context = true;
  }
  ollama_limit(s, m, job->prepared->gen, r);
  job->want_logprobs = r.chat.logprobs >= 0;
  ollama_respond(s, req, res, job, r.stream);
}

// --- the model: /api/tags, /api/ps, /api/show ---

std::string ollama_family(const Engine& e) {
  return e.config().model_type().empty() ? e.info().model_type : e.config().model_type();
}

json ollama_details(const std::string& family, const std::string& parameter_size,
                    const std::string& quantization_level) {
  return {{"parent_model", ""},
          {"format", "safetensors"},
          {"family", family},
          {"families", {family}},
          {"parameter_size", parameter_size},
          {"quantization_level", quantization_level}};
}

json ollama_details(const ServedModel& m) {
  const ModelInfo& i = m.engine->info();
  return ollama_details(ollama_family(*m.engine), ollama_parameter_size(i.n_params),
                        ollama_quantization_level(i.formats));
}

// When the checkpoint's config.json last changed (now, for an engine with no directory).
std::string ollama_modified_at(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!dir.empty()) {
    const auto t = fs::last_write_time(fs::path(dir) / "config.json", ec);
    if (!ec)
      return ollama_time(std::chrono::time_point_cast<std::chrono::system_clock::duration>(
          std::chrono::file_clock::to_sys(t)));
  }
  return ollama_now();
}

// The fields /api/tags and /api/ps share, for a loaded model.
json ollama_model_entry(const ServedModel& m) {
  const ModelInfo& i = m.engine->info();
  const std::string name = ollama_model_name(m.model_id);
  const std::string identity = fmt::format(
      "{}\n{}\n{}\n{}", m.model_id, m.engine->config().full().dump(), i.weight_bytes, i.n_params);
  return {{"name", name},
          {"model", name},
          {"size", i.weight_bytes},
          {"digest", ollama_digest(identity)},
          {"details", ollama_details(m)}};
}

// The same for a model listed but not loaded: what its directory tells without loading it.
json ollama_model_entry(const ModelEntry& e) {
  std::string family;
  std::ifstream in(std::filesystem::path(e.dir) / "config.json");
  const json config = json::parse(in, nullptr, false);
  if (config.is_object() && config.contains("model_type") && config["model_type"].is_string())
    family = config["model_type"].get<std::string>();
  const std::string name = ollama_model_name(e.id);
  return {{"name", name},
          {"model", name},
          {"size", e.bytes},
          {"digest", ollama_digest(fmt::format("{}\n{}\n{}", e.id, e.dir, e.bytes))},
          {"details", ollama_details(family, "", "")}};
}

json ollama_tags(const ServerState& s) {
  json models = json::array();
  if (s.pool) {
    std::map<std::string, json> loaded;
    s.pool->for_each_loaded(
        [&](const ServedModel& m) { loaded[m.model_id] = ollama_model_entry(m); });
    for (const ModelEntry& e : s.pool->entries()) {
      auto it = loaded.find(e.id);
      json m = it != loaded.end() ? it->second : ollama_model_entry(e);
      m["modified_at"] = ollama_modified_at(e.dir);
      models.push_back(std::move(m));
    }
  } else if (s.model) {
    json m = ollama_model_entry(*s.model);
    m["modified_at"] = ollama_modified_at(s.model->dir);
    models.push_back(std::move(m));
  }
  return {{"models", models}};
}

json ollama_ps(const ServerState& s) {
  json models = json::array();
  for_each_loaded_model(s, [&](const ServedModel& sm) {
    json m = ollama_model_entry(sm);
    // Loaded until unloaded for another model (several) or for the server's lifetime: Ollama's
    // "forever" is now + the largest duration.
    m["expires_at"] =
        ollama_time_from_unix(int64_t(std::time(nullptr)) + INT64_MAX / 1'000'000'000);
    m["size_vram"] = s.options.device == "cpu" ? size_t(0) : sm.engine->info().weight_bytes;
    m["context_length"] = sm.engine->n_ctx();
    models.push_back(std::move(m));
  });
  return {{"models", models}};
}

bool ollama_can_think(const ServedModel& m) {
  const std::string& t = m.chat_template_source;
  return t.find("<think>") != std::string::npos || t.find("enable_thinking") != std::string::npos ||
         t.find("reasoning_content") != std::string::npos;
}

json ollama_show(const ServedModel& m) {
  const Engine& e = *m.engine;
  const ModelInfo& i = e.info();
  const std::string family = ollama_family(e);
  json info = {{"general.architecture", family},         {"general.basename", m.model_id},
               {"general.parameter_count", i.n_params},  {family + ".context_length", e.n_ctx()},
               {family + ".embedding_length", i.n_embd}, {family + ".block_count", i.n_layer},
               {family + ".vocab_size", i.n_vocab}};
  const json& cfg = e.config().raw();
  // config.json's names → the GGUF-style keys Ollama clients read.
  static const std::pair<const char*, const char*> config_keys[] = {
      {"num_attention_heads", ".attention.head_count"},
      {"num_key_value_heads", ".attention.head_count_kv"},
      {"intermediate_size", ".feed_forward_length"},
      {"rope_theta", ".rope.freq_base"},
      {"rms_norm_eps", ".attention.layer_norm_rms_epsilon"}};
  for (auto [key, name] : config_keys)
    if (auto it = cfg.find(key); it != cfg.end() && it->is_number()) info[family + name] = *it;

  const SamplingParams& d = e.default_sampling();
  std::vector<std::pair<std::string, std::string>> params = {
      {"num_ctx", std::to_string(e.n_ctx())}, {"temperature", fmt::format("{:g}", d.temperature)}};
  if (d.top_k > 0) params.push_back({"top_k", std::to_string(d.top_k)});
  if (d.top_p < 1) params.push_back({"top_p", fmt::format("{:g}", d.top_p)});
  if (d.min_p > 0) params.push_back({"min_p", fmt::format("{:g}", d.min_p)});
  if (d.repetition_penalty != 1)
    params.push_back({"repeat_penalty", fmt::format("{:g}", d.repetition_penalty)});
  std::string parameters, modelfile = fmt::format(
                              "# Modelfile generated by hearth serve (the template is the "
                              "checkpoint's Jinja chat template)\nFROM {}\n",
                              m.dir.empty() ? m.model_id : m.dir);
  if (!m.chat_template_source.empty())
    modelfile += "TEMPLATE \"\"\"" + m.chat_template_source + "\"\"\"\n";
  for (const auto& [k, v] : params) {
    parameters += fmt::format("{}{:<30} {}", parameters.empty() ? "" : "\n", k, v);
    modelfile += fmt::format("PARAMETER {} {}\n", k, v);
  }
  json caps = {"completion"};
  if (m.tool_format != chat::ToolCallFormat::None) caps.push_back("tools");
  if (ollama_can_think(m)) caps.push_back("thinking");
  json details = ollama_details(m);
  details["context_length"] = e.n_ctx();
  details["embedding_length"] = i.n_embd;
  return {{"modelfile", modelfile},
          {"parameters", parameters},
          {"template", m.chat_template_source},
          {"details", details},
          {"model_info", info},
          {"capabilities", caps},
          {"modified_at", ollama_modified_at(m.dir)}};
}

// /api/embed: `input` a string or a list of them, `truncate` (default true: an input over the
// context keeps its first tokens; false: a 400), `dimensions`; the answer holds `embeddings`.
// The older /api/embeddings takes one `prompt` and answers one `embedding`.
void ollama_embed(ServerState& s, const ojson& body, http::Response& res, bool legacy) {
  const auto arrival = Clock::now();
  const std::string name = parse_ollama_model(body);
  const ModelRef m = ollama_model(s, name);
  const Tokenizer* tok = m->engine->tokenizer();
  if (!tok) bad_request("this model has no tokenizer", "input");
  std::vector<std::string> texts;
  const char* key = legacy ? "prompt" : "input";
  const ojson* input = field(body, key);
  if (input && input->is_string()) {
    texts.push_back(input->get<std::string>());
  } else if (!legacy && input && input->is_array()) {
    for (const auto& t : *input) {
      if (!t.is_string()) bad_request("input must be a string or a list of strings", "input");
      texts.push_back(t.get<std::string>());
    }
  } else {
    bad_request(legacy ? "prompt must be a string" : "input must be a string or a list of strings",
                key);
  }
  const bool truncate = get_bool(body, "truncate").value_or(true);
  const std::optional<int64_t> dimensions =
      get_int(body, "dimensions", 1, m->engine->info().n_embd);
  json embeddings = json::array();
  int64_t tokens = 0;
  for (const std::string& text : texts) {
    if (text.empty()) bad_request("an input is an empty string", key);
    std::vector<int32_t> ids = tok->encode(text, true);
    if (int64_t(ids.size()) > m->engine->n_ctx()) {
      if (!truncate)
        bad_request(fmt::format("the input has {} tokens, more than the context of {} (truncate "
                                "is false)",
                                ids.size(), m->engine->n_ctx()),
                    key);
      ids.resize(size_t(m->engine->n_ctx()));
    }
    if (s.stopping) throw ApiError(503, "the server is shutting down");
    std::vector<float> v = m->engine->embed(ids);
    if (dimensions) truncate_embedding(v, *dimensions, m->engine->embedding_config().normalize);
    tokens += int64_t(ids.size());
    embeddings.push_back(std::move(v));
  }
  if (legacy) return send_json(res, {{"embedding", embeddings[0]}});
  send_json(
      res,
      {{"model", name},
       {"embeddings", embeddings},
       {"total_duration",
        int64_t(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - arrival).count())},
       {"load_duration", 0},
       {"prompt_eval_count", tokens}});
}

}  // namespace

void register_ollama_routes(http::Router& http, ServerState& s) {
  http.post("/api/chat", json_post(s, ApiStyle::Ollama, "/api/chat",
                                   [&s](const ojson& b, const http::Request& q, http::Response& r) {
                                     ollama_chat(s, b, q, r);
                                   }));
  http.post("/api/generate", json_post(s, ApiStyle::Ollama, "/api/generate",
                                       [&s](const ojson& b, const http::Request& q,
                                            http::Response& r) { ollama_generate(s, b, q, r); }));
  http.get("/api/tags", json_get(s, ApiStyle::Ollama, "/api/tags", false,
                                 [&s](const http::Request&, http::Response& res) {
                                   send_json(res, ollama_tags(s));
                                 }));
  http.get("/api/ps", json_get(s, ApiStyle::Ollama, "/api/ps", false,
                               [&s](const http::Request&, http::Response& res) {
                                 send_json(res, ollama_ps(s));
                               }));
  http.get("/api/version",
           json_get(s, ApiStyle::Ollama, "/api/version", false,
                    [](const http::Request&, http::Response& res) {
                      send_json(res, {{"version", kOllamaApiVersion}});
                    }),
           http::RunOn::IoThread);
  http.post("/api/show",
            json_post(s, ApiStyle::Ollama, "/api/show",
                      [&s](const ojson& body, const http::Request&, http::Response& res) {
                        const ModelRef m = ollama_model(s, parse_ollama_model(body));
                        get_bool(body, "verbose");  // nothing is left out without it
                        send_json(res, ollama_show(*m));
                      }));
  http.post("/api/embed",
            json_post(s, ApiStyle::Ollama, "/api/embed",
                      [&s](const ojson& body, const http::Request&, http::Response& res) {
                        ollama_embed(s, body, res, /*legacy=*/false);
                      }));
  http.post("/api/embeddings",
            json_post(s, ApiStyle::Ollama, "/api/embeddings",
                      [&s](const ojson& body, const http::Request&, http::Response& res) {
                        ollama_embed(s, body, res, /*legacy=*/true);
                      }));
  for (const char* path : {"/api/pull", "/api/push", "/api/create", "/api/copy"})
    http.post(path, json_post(s, ApiStyle::Ollama, path,
                              [path](const ojson&, const http::Request&, http::Response&) {
                                throw ApiError(501, fmt::format("{} is not supported: hearth serve "
                                                                "does not manage models (`hearth "
                                                                "pull` downloads them)",
                                                                path));
                              }));
}

}  // namespace hearth::server
