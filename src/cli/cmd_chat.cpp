// `hearth chat`: an interactive chat in the terminal with the model's chat template. Replies
// stream; the model's thinking streams dimmed and folds into one line when the answer begins
// (/thinking shows it again); each reply ends with its token counts and speed. Earlier turns
// are reused from the prompt cache, so a turn prefills only what is new. Input: one line per
// message, a line ending in \ continues, """ opens and closes a block of several lines;
// commands start with / (/help). Piped stdin works too (no prompts, no colours).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>

#include "chat/reasoning_parser.h"
#include "cli/chat_session.h"
#include "cli/command.h"
#include "cli/common.h"
#include "cli/progress.h"
#include "cli/terminal.h"
#include "core/error.h"
#include "runtime/engine.h"

namespace hearth::cli {

namespace {

struct ChatOptions {
  ModelOptions model;
  SamplingOptions sampling;
  int64_t ctx = 0;
  int64_t max_tokens = 0;
  std::string system;
  bool think = false, no_think = false;
  bool show_thinking = false;
};

// Ctrl-C while a reply streams stops that reply; at the prompt it ends the program as usual.
std::atomic<bool>* g_reply_cancel = nullptr;
void cancel_reply(int) {
  if (g_reply_cancel) g_reply_cancel->store(true);
}

class SigintCancels {
 public:
  explicit SigintCancels(std::atomic<bool>* flag) {
    g_reply_cancel = flag;
    struct sigaction sa {};
    sa.sa_handler = cancel_reply;
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintCancels() {
    sigaction(SIGINT, &old_, nullptr);
    g_reply_cancel = nullptr;
  }

 private:
  struct sigaction old_ {};
};

// One reply on the screen: thinking dimmed (on a terminal; elsewhere only with
// --show-thinking, between <think> tags), the answer plain. Runs on the engine's thread.
class ReplyPrinter {
 public:
  ReplyPrinter(bool terminal, bool keep_thinking, bool starts_in_reasoning)
      : terminal_(terminal), keep_thinking_(keep_thinking), parser_(starts_in_reasoning) {}

  void push(std::string_view text) { show(parser_.push(text)); }
  void finish() {
    show(parser_.finish());
    end_thinking();
    if (!content_.empty() && content_.back() != '\n') std::fputs("\n", stdout);
    std::fflush(stdout);
  }
  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }

 private:
  void show(const chat::ReasoningSplit& split) {
    if (!split.reasoning.empty()) {
      if (reasoning_.empty()) {
        thinking_started_ = std::chrono::steady_clock::now();
        if (terminal_) std::fputs(kDim, stdout);
        if (!terminal_ && keep_thinking_) std::fputs("<think>\n", stdout);
      }
      reasoning_ += split.reasoning;
      if (terminal_ || keep_thinking_) thinking_.write(split.reasoning);
    }
    if (!split.content.empty()) {
      end_thinking();
      // The answer's first characters: the newlines a template leaves after </think> are noise.
      std::string_view text = split.content;
      if (content_.empty()) text.remove_prefix(std::min(text.find_first_not_of('\n'), text.size()));
      content_ += text;
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  }

  // The answer begins (or the reply ended): fold the thinking into one line if it is still
  // all on screen, unless it should stay.
  void end_thinking() {
    if (reasoning_.empty() || thinking_done_) return;
    thinking_done_ = true;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - thinking_started_).count();
    if (!terminal_) {
      if (keep_thinking_) std::fputs("\n</think>\n\n", stdout);
      return;
    }
    if (!keep_thinking_ && thinking_.fits_on_screen()) {
      thinking_.erase();
      std::printf("%sThought for %.1f s (/thinking shows it)%s\n\n", kDim, seconds, kReset);
    } else {
      std::printf("%s\n\n", kReset);
    }
    std::fflush(stdout);
  }

  bool terminal_, keep_thinking_;
  chat::ReasoningParser parser_;
  ErasableText thinking_;
  std::chrono::steady_clock::time_point thinking_started_;
  bool thinking_done_ = false;
  std::string reasoning_, content_;
};

void print_help(const ChatSession& session) {
  std::printf(
      "/reset            forget the conversation (the system prompt stays)\n"
      "/system [TEXT]    set the system prompt (no TEXT: remove it)\n"
      "%s"
      "/thinking         show the last reply's thinking\n"
      "/save FILE        save the conversation as JSON\n"
      "/load FILE        continue a saved conversation\n"
      "/bye              quit (or Ctrl-D)\n"
      "A line ending in \\ continues on the next; \"\"\" starts and ends a block of lines.\n"
      "Ctrl-C stops a reply. //text sends /text.\n",
      session.template_has_thinking_switch() ? "/think on|off     let the model think first\n"
                                             : "");
}

// The next message: a line, lines joined by trailing backslashes, or a """ block. nullopt at
// the end of input.
std::optional<std::string> read_message(LineReader& reader) {
  auto line = reader.read(">>> ");
  if (!line) return std::nullopt;
  std::string text = *line;
  if (text.rfind("\"\"\"", 0) == 0) {
    text.erase(0, 3);
    while (text.find("\"\"\"") == std::string::npos) {
      auto more = reader.read("... ");
      if (!more) break;
      text += "\n" + *more;
    }
    const size_t close = text.find("\"\"\"");
    if (close != std::string::npos) text.erase(close);
    // Quotes on lines of their own open and close the block; their line breaks are not in it.
    if (!text.empty() && text.front() == '\n') text.erase(0, 1);
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  while (!text.empty() && text.back() == '\\') {
    text.back() = '\n';
    auto more = reader.read("... ");
    if (!more) break;
    text += *more;
  }
  return text;
}

std::string after_command(const std::string& text, size_t name_length) {
  std::string rest = text.substr(std::min(name_length, text.size()));
  rest.erase(0, rest.find_first_not_of(" \t"));
  return rest;
}

class ChatLoop {
 public:
  ChatLoop(ChatOptions& o, Engine& engine, SamplingParams sampling)
      : o_(o), engine_(engine), session_(*engine.tokenizer()), sampling_(std::move(sampling)) {
    session_.set_system(o.system);
    if (o.think || o.no_think) session_.set_thinking(o.think);
    const int64_t ctx = engine.n_ctx();
    reply_tokens_ = o.max_tokens > 0 ? std::min(o.max_tokens, ctx - 1)
                                     : std::max<int64_t>(1, std::min<int64_t>(4096, ctx / 2));
  }

  int run() {
    if (terminal_)
      std::printf("%shearth chat: %s, context %lld tokens. /help for commands, Ctrl-D quits.%s\n",
                  kDim, engine_.info().model_type.c_str(), (long long)engine_.n_ctx(), kReset);
    LineReader reader;
    while (auto text = read_message(reader)) {
      if (text->find_first_not_of(" \t\n") == std::string::npos) continue;
      reader.remember(*text);
      if ((*text)[0] == '/' && text->rfind("//", 0) != 0) {
        if (!command(*text)) break;
        continue;
      }
      reply((*text)[0] == '/' ? text->substr(1) : *text);
    }
    return 0;
  }

 private:
  void note(const std::string& text) {
    std::fprintf(stderr, "%s%s%s\n", terminal_ ? kDim : "", text.c_str(), terminal_ ? kReset : "");
  }

  // Runs a /command; false to quit.
  bool command(const std::string& text) {
    const std::string name = text.substr(0, text.find_first_of(" \t"));
    const std::string arg = after_command(text, name.size());
    try {
      if (name == "/bye" || name == "/exit" || name == "/quit") return false;
      if (name == "/help" || name == "/?") {
        print_help(session_);
      } else if (name == "/reset") {
        session_.reset();
        note("conversation cleared");
      } else if (name == "/system") {
        session_.set_system(arg);
        note(arg.empty() ? "system prompt removed" : "system prompt set");
      } else if (name == "/think" && session_.template_has_thinking_switch()) {
        if (arg != "on" && arg != "off") fail("/think takes on or off");
        session_.set_thinking(arg == "on");
        note(arg == "on" ? "thinking on" : "thinking off");
      } else if (name == "/thinking") {
        note(last_reasoning_.empty() ? "the last reply had no thinking" : last_reasoning_);
      } else if (name == "/save") {
        if (arg.empty()) fail("/save needs a file name");
        session_.save(arg);
        note("saved " + std::to_string(session_.n_messages()) + " messages to " + arg);
      } else if (name == "/load") {
        if (arg.empty()) fail("/load needs a file name");
        session_.load(arg);
        note("loaded " + std::to_string(session_.n_messages()) + " messages from " + arg);
      } else {
        note("unknown command " + name + " (/help lists them; //text sends /text)");
      }
    } catch (const Error& e) {
      note(e.what());
    }
    return true;
  }

  void reply(const std::string& user) {
    ChatPrompt prompt;
    try {
      prompt = session_.prompt_for(user, engine_.n_ctx(), reply_tokens_);
    } catch (const Error& e) {
      note(e.what());
      return;
    }
    if (prompt.turns_left_out > 0)
      note("(the " + std::to_string(prompt.turns_left_out) +
           " earliest messages are left out: the context is full)");
    GenerationRequest request;
    request.prompt = std::move(prompt.tokens);
    request.max_tokens = reply_tokens_;
    request.sampling = sampling_;
    request.cancel = std::make_shared<std::atomic<bool>>(false);
    ReplyPrinter printer(terminal_, o_.show_thinking, prompt.starts_in_reasoning);
    ProgressLine prefill("prefill", "tokens", 1);
    GenerationResult result;
    {
      SigintCancels sigint(request.cancel.get());
      result = engine_.generate(
          std::move(request),
          [&](const GenerationDelta& d) {
            prefill.erase();
            printer.push(d.text);
          },
          [&](int64_t done, int64_t total) { prefill.update(done, total); });
    }
    prefill.erase();
    printer.finish();
    last_reasoning_ = printer.reasoning();
    if (result.finish_reason == "error") {
      note("error: " + result.error);
      return;
    }
    if (result.finish_reason == "cancelled") {
      note("[stopped; this reply is not kept]");
      return;
    }
    session_.add_exchange(user, printer.content(), printer.reasoning());
    const GenerationTimings& t = result.timings;
    const GenerationUsage& u = result.usage;
    const double speed = t.decode_ms > 0 && t.decode_tokens > 1
                             ? double(t.decode_tokens - 1) * 1e3 / t.decode_ms
                             : 0.0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "%lld tokens, %.1f tokens/s | prompt %lld tokens (%lld cached), first token "
                  "after %.2f s%s",
                  (long long)u.completion_tokens, speed, (long long)u.prompt_tokens,
                  (long long)u.cached_tokens, t.ttft_ms / 1e3,
                  result.finish_reason == "length" ? " | cut at the reply limit" : "");
    note(line);
  }

  ChatOptions& o_;
  Engine& engine_;
  ChatSession session_;
  SamplingParams sampling_;
  int64_t reply_tokens_ = 0;
  bool terminal_ = stdout_is_terminal();
  std::string last_reasoning_;
};

int run_chat(ChatOptions& o) {
  if (o.ctx < 0) fail("--ctx must be >= 0, got {}", o.ctx);
  if (o.max_tokens < 0) fail("--max-tokens must be >= 0, got {}", o.max_tokens);
  EngineOptions eo = engine_options_from(o.model);
  eo.n_ctx = o.ctx;
  eo.max_running = 1;
  ProgressLine load_line("loading weights", "GB", 1e9);
  eo.load_progress = [&load_line](size_t done, size_t total) {
    load_line.update(int64_t(done), int64_t(total));
  };
  auto engine = Engine::load(eo);
  load_line.erase(true);
  if (!engine->tokenizer()) fail("{}: this model has no tokenizer.json", eo.model_dir);
  SamplingParams sampling = make_sampling_params(o.sampling, engine->default_sampling());
  sampling.validate(engine->info().n_vocab);
  ChatLoop loop(o, *engine, sampling);
  return loop.run();
}

CommandRegistration chat_command("chat", "chat with a model in the terminal", [](CLI::App& sub) {
  auto o = std::make_shared<ChatOptions>();
  add_model_options(sub, o->model);
  add_sampling_options(sub, o->sampling);
  sub.add_option("--ctx", o->ctx, "context in tokens (default: the model's)");
  sub.add_option("-n,--max-tokens", o->max_tokens,
                 "tokens per reply (default: 4096, at most half the context)");
  sub.add_option("--system", o->system, "system prompt");
  auto* think = sub.add_flag("--think", o->think,
                             "let the model think before it answers (templates with "
                             "enable_thinking; default: the template's)");
  sub.add_flag("--no-think", o->no_think, "ask the model to answer without thinking")
      ->excludes(think);
  sub.add_flag("--show-thinking", o->show_thinking,
               "keep the thinking on screen (piped: print it between <think> tags)");
  return [o] { return run_chat(*o); };
});

}  // namespace
}  // namespace hearth::cli
