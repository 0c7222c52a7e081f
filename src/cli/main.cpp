// The hearth command: parses the command line and dispatches to a registered subcommand.
// Every user error (bad flag, missing file, bad model) ends as one line on stderr and exit 1.
#include <cstdio>
#include <map>
#include <string>

#include "cli/command.h"
#include "cli/common.h"
#include "core/error.h"

namespace hearth::cli {
std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}
std::string version_string();
}  // namespace hearth::cli

int main(int argc, char** argv) {
  using namespace hearth::cli;
  CLI::App app{"hearth: local LLM inference engine"};
  app.set_version_flag("--version", version_string());
  app.require_subcommand(1);
  std::map<std::string, CommandRun> runs;
  std::map<std::string, CLI::App*> subs;
  for (auto& spec : command_registry()) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    runs[spec.name] = spec.setup(*sub);
    subs[spec.name] = sub;
  }
  std::vector<std::string> args = expand_short_aliases(argc, argv);
  std::vector<char*> arg_ptrs;
  for (std::string& a : args) arg_ptrs.push_back(a.data());
  try {
    app.parse(int(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "hearth: %s\n", e.what());
    return 2;
  }
  for (auto& [name, sub] : subs) {
    if (!sub->parsed()) continue;
    try {
      return runs[name]();
    } catch (const hearth::Error& e) {
      std::fprintf(stderr, "hearth %s: %s\n", name.c_str(), e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hearth %s: internal error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  return 1;
}
