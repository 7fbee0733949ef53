#include "cli/command.h"

#include "wam/error.h"

namespace wam::cli {

void CommandRegistry::add(std::string name, Factory factory) {
  if (factories_.count(name)) throw Error("command \"" + name + "\" is registered twice");
  factories_.emplace(std::move(name), std::move(factory));
}

std::vector<std::unique_ptr<Command>> CommandRegistry::create_all(CLI::App& app) const {
  std::vector<std::unique_ptr<Command>> commands;
  for (const auto& [name, factory] : factories_) commands.push_back(factory(app));
  return commands;
}

CommandRegistry& CommandRegistry::builtin() {
  static CommandRegistry registry;
  return registry;
}

}  // namespace wam::cli
