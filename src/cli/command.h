// Subcommand registry for the hearth CLI: each cmd_*.cpp registers its subcommands with a static
// CommandRegistration, so adding a command touches no other file. A command's setup function adds
// its options to a CLI11 subcommand and returns the function that runs it (exit code).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace hearth::cli {

using CommandRun = std::function<int()>;
using CommandSetup = std::function<CommandRun(CLI::App& sub)>;

struct CommandSpec {
  std::string name;
  std::string description;
  CommandSetup setup;
};

std::vector<CommandSpec>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, std::string description, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace hearth::cli
