// hearth_test_serve: helper for the end-to-end tests (tests/server/run-e2e.sh).
//   hearth_test_serve make-model DIR      writes the random-weight qwen3 test checkpoint
//   hearth_test_serve scripted [--port P] [--api-key K] [--ctx N] [--scripts FILE]
//                                         serves the scripted model with the real server,
//                                         engine, tokenizer and chat template: default_scripts(),
//                                         or the scripts of FILE, a JSON array of
//                                         {"anchor": ..., "response": ...} (a test that knows
//                                         only at run time what to script, e.g. the agents'
//                                         absolute paths, writes them there)
// Prints "ready at URL" like hearth serve; stops on SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "server/server.h"
#include "test_model.h"

using namespace hearth;

namespace {

std::vector<testing::Script> load_scripts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("--scripts " + path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::runtime_error("--scripts " + path + ": not valid JSON");
  if (!j.is_array() || j.empty())
    throw std::runtime_error("--scripts " + path + ": expected a non-empty JSON array");
  std::vector<testing::Script> scripts;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& s = j[i];
    if (!s.is_object() || !s.contains("anchor") || !s["anchor"].is_string() ||
        s["anchor"].get<std::string>().empty() || !s.contains("response") ||
        !s["response"].is_string())
      throw std::runtime_error("--scripts " + path + ": item " + std::to_string(i) +
                               " must be {\"anchor\": non-empty string, \"response\": string}");
    scripts.push_back({s["anchor"].get<std::string>(), s["response"].get<std::string>()});
  }
  return scripts;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc >= 3 && std::strcmp(argv[1], "make-model") == 0) {
    testing::make_random_qwen3(argv[2]);
    return 0;
  }
  if (argc < 2 || std::strcmp(argv[1], "scripted") != 0) {
    std::fprintf(stderr,
                 "usage: %s make-model DIR | scripted [--port P] [--api-key K] [--ctx N] "
                 "[--scripts FILE]\n",
                 argv[0]);
    return 2;
  }
  server::ServerOptions o;
  o.port = 0;
  o.web_dir = std::string(HEARTH_SOURCE_DIR) + "/web";
  std::vector<testing::Script> scripts = testing::default_scripts();
  for (int i = 2; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::runtime_error(k + " needs a value");
    if (k == "--port")
      o.port = std::stoi(argv[i + 1]);
    else if (k == "--api-key")
      o.api_key = argv[i + 1];
    else if (k == "--ctx")
      o.n_ctx = std::stoll(argv[i + 1]);
    else if (k == "--scripts")
      scripts = load_scripts(argv[i + 1]);
    else
      throw std::runtime_error("unknown option " + k);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const auto tok_dir = testing::qwen3_tokenizer_dir();
  auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(tok_dir));
  auto model = testing::make_scripted_model(*tok, scripts);
  nlohmann::json cfg = {{"model_type", "qwen3"}};
  EngineOptions eo;
  eo.n_ctx = o.n_ctx;
  auto engine = std::make_shared<Engine>(std::move(model), tok, ModelConfig::from_json(cfg), eo);
  server::Server srv(o);
  srv.start();
  srv.set_engine(engine, "scripted");
  std::printf("hearth serve: ready at %s (model scripted)\n", srv.url().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  srv.stop();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "hearth_test_serve: %s\n", e.what());
  return 1;
}
