// The smallest program embedding hearth: load a model, stream one chat reply to stdout, print
// what it cost. Build against the installed package (examples/CMakeLists.txt, or
// `g++ embed.cpp $(pkg-config --cflags --libs hearth)`), run: embed MODEL_DIR "question"
#include <hearth/hearth.h>

#include <cstdio>
#include <iostream>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPT\n", argv[0]);
    return 2;
  }
  try {
    auto runtime = hearth::Runtime::load({.model = argv[1]});
    hearth::CompletionRequest request;
    request.messages = {{"user", argv[2]}};
    request.max_tokens = 48;
    const hearth::Completion done = runtime->complete(request, [](std::string_view text) {
      std::cout << text << std::flush;  // each piece as it is generated
    });
    std::fprintf(stderr, "\n[%s: %lld prompt + %lld generated tokens, %.1f tokens/s]\n",
                 done.finish_reason.c_str(), (long long)done.prompt_tokens,
                 (long long)done.completion_tokens, done.decode_tokens_per_s);
    return done.finish_reason == "error" ? 1 : 0;
  } catch (const hearth::Error& e) {
    std::fprintf(stderr, "hearth: %s\n", e.what());
    return 1;
  }
}
