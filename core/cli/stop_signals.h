// SIGINT (Ctrl-C) and SIGTERM (what Slurm and Kubernetes send before killing) ask a long command
// to stop cleanly between units of work (`run` between items, `cache generate` between shards); a
// second signal ends the process at once.
#pragma once

#include <atomic>

namespace wam::cli {

// While one lives, both signals are caught: flag() turns true and signal() names the first; the
// default actions come back when it is destroyed (also when the command throws). One at a time.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  const std::atomic<bool>* flag() const;  // for RunOptions::interrupt and the like
  int signal() const;                     // SIGINT, SIGTERM, or 0 when none arrived
  // "SIGTERM" or "SIGINT", and the exit status a stopped command returns for it (128 + signal).
  static const char* name(int signal);
  static int exit_status(int signal);
};

}  // namespace wam::cli
