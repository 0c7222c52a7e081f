// hearth's public C++ API (include/hearth/hearth.h) over the engine (runtime/engine.h): requests
// become GenerationRequests (chat turns rendered with the model's template, sampling fields over
// the model's defaults), and each one's completion is kept in a shared state its handles wait on.
#include <condition_variable>
#include <mutex>

#include "api/runtime_internal.h"
#include "chat/encode_chat.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "hearth/hearth.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

struct Generation::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Completion result;
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
};

Generation::Generation(std::shared_ptr<State> state) : state_(std::move(state)) {}

void Generation::cancel() { state_->cancel->store(true); }

bool Generation::done() const {
  std::lock_guard lock(state_->mu);
  return state_->done;
}

Completion Generation::wait() {
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  return state_->result;
}

struct Runtime::Impl {
  RuntimeOptions options;
  mutable std::mutex mu;
  RuntimeMetrics finished;  // the counters of completed requests
  // Shared with an HTTP server serving this Runtime (runtime_internal.h), so it may outlive Impl.
  std::shared_ptr<Engine> engine;

  // Stopping the engine completes the requests it holds, whose callbacks count into `finished`
  // and point to this Impl: it is shut down here, whoever else still holds it.
  ~Impl() {
    if (engine) engine->shutdown();
  }

  std::vector<int32_t> prompt_tokens(const CompletionRequest& r) const {
    const Tokenizer* tok = engine->tokenizer();
    if (!tok) fail("the model has no tokenizer.json, so it cannot take text");
    if (r.messages.empty()) return tok->encode(r.prompt, true);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (const ChatTurn& t : r.messages)
      messages.push_back({{"role", t.role}, {"content", t.content}});
    return chat::encode_chat(*tok, messages, "CompletionRequest::messages");
  }

  void count(const GenerationResult& r) {
    std::lock_guard lock(mu);
    ++finished.requests_finished;
    finished.prompt_tokens += r.usage.prompt_tokens;
    finished.completion_tokens += r.usage.completion_tokens;
    finished.prompt_cache_hit_tokens += r.usage.cached_tokens;
  }
};

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Runtime::~Runtime() = default;

std::unique_ptr<Runtime> Runtime::load(const RuntimeOptions& options) {
  if (options.model.empty()) fail("RuntimeOptions::model: no model directory given");
  if (options.threads < 0) fail("RuntimeOptions::threads must be >= 0, got {}", options.threads);
  if (options.context < 0) fail("RuntimeOptions::context must be >= 0, got {}", options.context);
  if (options.parallel < 0) fail("RuntimeOptions::parallel must be >= 0, got {}", options.parallel);
  if (options.max_batch_tokens < 0)
    fail("RuntimeOptions::max_batch_tokens must be >= 0, got {}", options.max_batch_tokens);
  if (options.threads > 0) ThreadPool::set_global_threads(options.threads);
  EngineOptions engine;
  engine.model_dir = options.model;
  engine.device = options.device;
  engine.n_ctx = options.context;
  engine.max_running = options.parallel;
  engine.max_step_tokens = options.max_batch_tokens;
  engine.kv_budget_bytes = size_t(options.kv_budget_bytes);
  engine.cache_bytes = size_t(options.prompt_cache_bytes);
  engine.mmap = options.mmap;
  engine.deterministic = options.deterministic;
  engine.tensor_parallel = options.tensor_parallel;
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->engine = Engine::load(engine);
  return std::unique_ptr<Runtime>(new Runtime(std::move(impl)));
}

Generation Runtime::submit(const CompletionRequest& request,
                           std::function<void(std::string_view)> on_text) {
  if (request.max_tokens < 1)
    fail("CompletionRequest::max_tokens must be >= 1, got {}", request.max_tokens);
  GenerationRequest g;
  g.prompt = impl_->prompt_tokens(request);
  g.max_tokens = request.max_tokens;
  SamplingOverrides o;
  o.temperature = request.temperature;
  o.top_p = request.top_p;
  o.min_p = request.min_p;
  o.top_k = request.top_k;
  o.seed = request.seed;
  g.sampling = o.apply(impl_->engine->default_sampling());
  g.stop = request.stop;
  auto state = std::make_shared<Generation::State>();
  g.cancel = state->cancel;
  impl_->engine->validate(g);

  GenerationCallbacks callbacks;
  if (on_text)
    callbacks.on_delta = [on_text = std::move(on_text)](const GenerationDelta& d) {
      if (!d.text.empty()) on_text(d.text);
    };
  callbacks.on_done = [impl = impl_.get(), state](const GenerationResult& r) {
    impl->count(r);
    Completion c;
    c.text = r.text;
    c.finish_reason = r.finish_reason;
    c.error = r.error;
    c.prompt_tokens = r.usage.prompt_tokens;
    c.cached_prompt_tokens = r.usage.cached_tokens;
    c.completion_tokens = r.usage.completion_tokens;
    c.time_to_first_token_ms = r.timings.ttft_ms;
    c.decode_tokens_per_s = r.timings.decode_ms > 0 && r.timings.decode_tokens > 1
                                ? double(r.timings.decode_tokens - 1) * 1e3 / r.timings.decode_ms
                                : 0.0;
    {
      std::lock_guard lock(state->mu);
      state->result = std::move(c);
      state->done = true;
    }
    state->cv.notify_all();
  };
  impl_->engine->submit(std::move(g), std::move(callbacks));
  return Generation(state);
}

Completion Runtime::complete(const CompletionRequest& request,
                             std::function<void(std::string_view)> on_text) {
  return submit(request, std::move(on_text)).wait();
}

RuntimeMetrics Runtime::metrics() const {
  RuntimeMetrics m;
  {
    std::lock_guard lock(impl_->mu);
    m = impl_->finished;
  }
  const EngineStats load = impl_->engine->stats();
  m.requests_waiting = int64_t(load.waiting);
  m.requests_running = int64_t(load.running);
  m.preemptions = int64_t(load.preemptions);
  return m;
}

std::string Runtime::model_type() const { return impl_->engine->config().model_type(); }

int64_t Runtime::context() const { return impl_->engine->n_ctx(); }

std::shared_ptr<Engine> RuntimeInternals::engine(const Runtime& runtime) {
  return runtime.impl_->engine;
}

const RuntimeOptions& RuntimeInternals::options(const Runtime& runtime) {
  return runtime.impl_->options;
}

}  // namespace hearth
