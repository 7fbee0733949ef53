// What `wam-pipeline run` shows while it runs: the live view on a terminal, else a progress line
// every --report-every seconds (--quiet: neither), and the --trace-out file.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "wam/runner.h"

namespace wam::cli {

struct RunViewArgs {
  std::string trace_out;
  bool quiet = false;
};

// Adds --trace-out and --quiet to the run command.
void add_run_view_options(CLI::App& run, RunViewArgs& args);

class RunView {
 public:
  // `live`: draw the live view (stdout is a terminal); the caller decides, tests force it.
  RunView(const RunViewArgs& args, std::string pipeline, double report_every, bool live);
  ~RunView();

  // Sets the run's progress reporting, log sink and trace recording.
  void configure(RunOptions& options);
  // Writes the trace file, if asked for; the final frame stays on screen above the summary.
  void finish(const RunResult& result);

  static bool stdout_is_terminal();

 private:
  struct Terminal;
  RunViewArgs args_;
  double report_every_;
  std::unique_ptr<Terminal> terminal_;
};

}  // namespace wam::cli
