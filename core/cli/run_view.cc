#include "cli/run_view.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <iostream>
#include <mutex>

#include "cli/validators.h"
#include "wam/atomic_file.h"
#include "wam/live_view.h"
#include "wam/metrics.h"
#include "wam/trace.h"

namespace wam::cli {

// The live view's screen: frames and log lines share it under one lock, a log line going above
// the frame, which is then drawn again.
struct RunView::Terminal {
  explicit Terminal(std::string pipeline) : view(std::move(pipeline)) {}
  std::mutex mutex;
  LiveView view;
  std::vector<std::string> lines;

  static size_t width() {
    winsize size{};
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
    return 200;
  }
  void draw(const RunSnapshot& now) {
    std::lock_guard<std::mutex> lock(mutex);
    lines = view.frame(now, device_memory_in_use());
    std::cout << view.redraw(lines, width()) << std::flush;
  }
  void log(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    std::cout << view.erase() << std::flush;
    std::cerr << line << "\n" << std::flush;
    if (!lines.empty()) std::cout << view.redraw(lines, width()) << std::flush;
  }
};

void add_run_view_options(CLI::App& run, RunViewArgs& args) {
  run.add_option("--trace-out", args.trace_out,
                 "Write a Chrome trace-event file (opens in ui.perfetto.dev): each node's work "
                 "slices, training steps, tracks a stage adds under its node (the step's device "
                 "time on \"device\"), queue depth, in-flight and items/s counters. Bounded on "
                 "long runs: past 10000 slices per node or per stage track (at most 4 a node) and "
                 "2000 counter samples, every 2nd (then 4th...) is kept, about 2 MB per node and "
                 "1 MB per stage track at most")
      ->check(in_existing_directory());
  run.add_flag("--quiet", args.quiet,
               "No live view (drawn when stdout is a terminal) and no progress lines");
}

RunView::RunView(const RunViewArgs& args, std::string pipeline, double report_every, bool live)
    : args_(args), report_every_(report_every) {
  if (live && !args.quiet) terminal_ = std::make_unique<Terminal>(std::move(pipeline));
}

RunView::~RunView() = default;

bool RunView::stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

void RunView::configure(RunOptions& options) {
  options.report_every_s = args_.quiet || terminal_ ? 0.0 : report_every_;
  if (terminal_) {
    Terminal* terminal = terminal_.get();
    options.tick_every_s = 1.0;
    options.on_tick = [terminal](const RunSnapshot& now) { terminal->draw(now); };
    options.log = [terminal](const std::string& line) { terminal->log(line); };
  }
  if (!args_.trace_out.empty()) options.trace = TraceOptions{};
}

void RunView::finish(const RunResult& result) {
  if (args_.trace_out.empty() || result.trace.is_null()) return;
  write_file_atomically(args_.trace_out, result.trace.dump() + "\n");
  std::cerr << "wrote " << args_.trace_out << " (open it in ui.perfetto.dev)\n";
}

}  // namespace wam::cli
