// Product commands (dataset, text-cache, cache, compile, bench...) register like stages: each
// lives beside the stages it drives, in its own file, and adds itself to the built-in registry with
// WAM_REGISTER_COMMAND. The CLI framework (core/cli/app.cc) knows only this interface.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace wam::cli {

// Process exit statuses shared by every command.
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitInvalid = 2;
constexpr int kExitInterrupted = 130;  // SIGINT: 128 + 2
constexpr int kExitTerminated = 143;   // SIGTERM: 128 + 15

// One top-level subcommand (with its own subcommands, if any). The constructor adds its options to
// the app; after parsing, selected() says whether it was chosen and run() executes it. Errors
// escape run() as exceptions: wam::ConfigError exits 2, anything else 1, printed by the framework.
class Command {
 public:
  virtual ~Command() = default;
  virtual bool selected() const = 0;
  virtual int run() = 0;
};

class CommandRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Command>(CLI::App& app)>;

  // T needs: static constexpr std::string_view kName; explicit T(CLI::App&).
  template <class T>
  void add() {
    add(std::string(T::kName), [](CLI::App& app) { return std::make_unique<T>(app); });
  }
  void add(std::string name, Factory factory);  // throws wam::Error on a duplicate name

  // Every registered command added to `app`, in name order.
  std::vector<std::unique_ptr<Command>> create_all(CLI::App& app) const;

  // The process-wide registry of the commands linked into this binary.
  static CommandRegistry& builtin();

 private:
  std::map<std::string, Factory, std::less<>> factories_;
};

}  // namespace wam::cli

#define WAM_REGISTER_COMMAND(Class)                                   \
  [[maybe_unused]] static const bool wam_command_registered_##Class = \
      (::wam::cli::CommandRegistry::builtin().add<Class>(), true)
