// The hearth command: dispatches to subcommands (generate, logits, perplexity, bench, info, ...).
#include <cstdio>

int main() {
  std::puts("hearth " HEARTH_VERSION);
  return 0;
}
