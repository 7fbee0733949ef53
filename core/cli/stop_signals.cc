#include "cli/stop_signals.h"

#include <csignal>

#include "cli/command.h"

namespace wam::cli {
namespace {

std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_first_signal{0};

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  g_first_signal.compare_exchange_strong(none, signal);
  g_stop_requested.store(true);
  std::signal(signal, SIG_DFL);  // a second one ends the process at once
}

}  // namespace

StopSignals::StopSignals() {
  g_stop_requested.store(false);
  g_first_signal.store(0);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

StopSignals::~StopSignals() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
}

const std::atomic<bool>* StopSignals::flag() const { return &g_stop_requested; }

int StopSignals::signal() const { return g_first_signal.load(); }

const char* StopSignals::name(int signal) { return signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

int StopSignals::exit_status(int signal) {
  return signal == SIGTERM ? kExitTerminated : kExitInterrupted;
}

}  // namespace wam::cli
