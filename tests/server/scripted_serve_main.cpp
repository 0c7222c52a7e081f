// hearth_test_serve: helper for the end-to-end tests (tests/server/run-e2e.sh).
//   hearth_test_serve make-model DIR      writes the random-weight qwen3 test checkpoint
//   hearth_test_serve scripted [--port P] [--api-key K]
//                                         serves the scripted model (default_scripts()) with the
//                                         real server, engine, tokenizer and chat template
// Prints "ready at URL" like hearth serve; stops on SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "server/server.h"
#include "test_model.h"

using namespace hearth;

int main(int argc, char** argv) try {
  if (argc >= 3 && std::strcmp(argv[1], "make-model") == 0) {
    testing::make_random_qwen3(argv[2]);
    return 0;
  }
  if (argc < 2 || std::strcmp(argv[1], "scripted") != 0) {
    std::fprintf(stderr, "usage: %s make-model DIR | scripted [--port P] [--api-key K] [--ctx N]\n",
                 argv[0]);
    return 2;
  }
  server::ServerOptions o;
  o.port = 0;
  o.web_dir = std::string(HEARTH_SOURCE_DIR) + "/web";
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--port")
      o.port = std::stoi(argv[i + 1]);
    else if (k == "--api-key")
      o.api_key = argv[i + 1];
    else if (k == "--ctx")
      o.n_ctx = std::stoll(argv[i + 1]);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const auto tok_dir = testing::qwen3_tokenizer_dir();
  auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(tok_dir));
  auto model = testing::make_scripted_model(*tok, testing::default_scripts());
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
