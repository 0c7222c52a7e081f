// Serving a model over HTTP from a program of its own: load it with the C++ API, start the
// OpenAI- and Anthropic-compatible server (hearth/server.h) on it, stop on SIGINT or SIGTERM.
// Build against the installed package (examples/CMakeLists.txt, or
// `g++ serve.cpp $(pkg-config --cflags --libs hearth-server)`), run: serve MODEL_DIR [PORT]
// (PORT 0, the default: any free port), then e.g. `curl URL/v1/models`.
#include <hearth/server.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [PORT]\n", argv[0]);
    return 2;
  }
  // Blocked before any thread starts, so every thread inherits the mask and the stop signals
  // reach only sigwait() below: shutdown then runs as ordinary code.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    auto runtime = hearth::Runtime::load({.model = argv[1]});
    hearth::ApiServer server(*runtime, {.port = argc == 3 ? std::atoi(argv[2]) : 0});
    server.start();
    std::printf("serving %s at %s\n", runtime->model_type().c_str(), server.url().c_str());
    std::fflush(stdout);
    int received = 0;
    sigwait(&stop_signals, &received);
    server.stop();  // in-flight requests end with an error; the runtime is destroyed after it
    return 0;
  } catch (const hearth::Error& e) {
    std::fprintf(stderr, "hearth: %s\n", e.what());
    return 1;
  }
}
