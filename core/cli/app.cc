// wam-pipeline: run, validate, inspect and draw training pipelines.
#include "cli/app.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>

#include <CLI/CLI.hpp>

#include "cli/command.h"
#include "cli/run_view.h"
#include "cli/stop_signals.h"
#include "cli/validators.h"
#include "cli/view_commands.h"
#include "wam/atomic_file.h"
#include "wam/data_check.h"
#include "wam/library_binding.h"
#include "wam/pipeline.h"
#include "wam/registry.h"
#include "wam/runner.h"

namespace {

using wam::cli::kExitFailed;
using wam::cli::kExitInvalid;
using wam::cli::kExitOk;

struct PipelineArgs {
  std::string file;
  std::vector<std::string> overrides;
};

void add_pipeline_args(CLI::App& command, PipelineArgs& args) {
  command.add_option("pipeline", args.file, "Pipeline JSON file")->required();
  command.add_option("--set", args.overrides,
                     "Override a value before includes resolve: path.to.key=VALUE (VALUE is JSON, "
                     "else a string); e.g. --set settings.batch_size=8 --set "
                     "nodes.decode.params.mode=full --set include.model=configs/model/tiny.json");
}

const char* const kPrintConfigHelp =
    "Print the effective pipeline: \"extends\", --set, includes and $refs resolved, defaults "
    "filled in; and on stderr the environment variables with project defaults, resolved";

struct RunArgs {
  PipelineArgs pipeline;
  int64_t steps = -1, threads = -1;
  std::string stop_after, stats_out;
  double report_every = 10;
  bool print_config = false;
  wam::cli::RunViewArgs view;
};

CLI::App* add_run_command(CLI::App& app, RunArgs& args) {
  using wam::cli::at_least;
  auto* run = app.add_subcommand("run", "Run a pipeline and print a per-node summary");
  add_pipeline_args(*run, args.pipeline);
  run->add_option("--steps", args.steps,
                  "Stop after the terminal node emitted N items (overrides settings.steps)")
      ->check(at_least(0));
  run->add_option(
      "--stop-after", args.stop_after,
      "Run only NODE and what is upstream of it; what leaves NODE is counted and dropped");
  run->add_option("--stats-out", args.stats_out,
                  "Write the per-node statistics as JSON to this file")
      ->check(wam::cli::in_existing_directory());
  run->add_option("--report-every", args.report_every,
                  "Seconds between progress lines showing each node's busy%; 0 turns them off")
      ->capture_default_str()
      ->check(at_least(0));
  run->add_option("--threads", args.threads,
                  "Worker threads (overrides settings.threads; 0: one per core; at most " +
                      std::to_string(wam::kMaxThreadsPerCore) + " per core)")
      ->check(wam::cli::thread_count());
  run->add_flag("--print-config", args.print_config, kPrintConfigHelp);
  wam::cli::add_run_view_options(*run, args.view);
  return run;
}

int cmd_run(const RunArgs& args) {
  wam::LoadOptions options{args.pipeline.overrides};
  if (args.steps >= 0) options.overrides.push_back("settings.steps=" + std::to_string(args.steps));
  if (args.threads >= 0) {
    options.overrides.push_back("settings.threads=" + std::to_string(args.threads));
  }
  wam::ValidatedPipeline pipeline = wam::load_pipeline(args.pipeline.file, options);
  const std::string& stop_after = args.stop_after;
  if (!stop_after.empty()) pipeline.keep_upstream_of(stop_after);
  if (args.print_config) {
    std::cout << pipeline.effective_config().dump(2) << "\n";
    std::cerr << wam::describe_environment();  // stdout stays one JSON document
  }
  std::cerr << "running " << pipeline.name() << " (" << pipeline.nodes().size() << " nodes"
            << (stop_after.empty() ? "" : ", stopping after " + stop_after) << ")\n";

  std::optional<wam::cli::StopSignals> stop_signals(std::in_place);
  wam::RunOptions run_options;
  run_options.report_every_s = args.report_every;
  run_options.interrupt = stop_signals->flag();
  wam::cli::RunView view(args.view, pipeline.name(), args.report_every,
                         wam::cli::RunView::stdout_is_terminal());
  view.configure(run_options);
  wam::RunResult result = wam::run_pipeline(pipeline, run_options);
  const int signal = stop_signals->signal();
  stop_signals.reset();  // from here a signal ends the process at once
  view.finish(result);

  std::cout << result.stats.table();
  if (const std::string& stats_out = args.stats_out; !stats_out.empty()) {
    nlohmann::json stats = result.stats.to_json();
    if (!result.source_state.is_null()) stats["source_state"] = result.source_state;
    if (result.error) stats["error"] = result.error->what();
    if (signal != 0) stats["signal"] = wam::cli::StopSignals::name(signal);
    // Error text may quote bytes of a damaged file that are not UTF-8: shown as U+FFFD.
    wam::write_file_atomically(
        stats_out, stats.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    std::cerr << "wrote " << stats_out << "\n";
  }
  if (result.error) {
    std::cerr << "error: " << result.error->what() << "\n";
    return kExitFailed;
  }
  if (result.stats.stop_reason == "interrupted") {
    std::cerr << "stopped by " << wam::cli::StopSignals::name(signal) << "\n";
    return wam::cli::StopSignals::exit_status(signal);
  }
  return kExitOk;
}

void print_error_count(const std::string& file, size_t errors, const char* what) {
  std::cerr << file << ": " << errors << " " << what << (errors == 1 ? "" : "s") << "\n";
}

// With `data`, the registered data checks (wam/data_check.h) run on each pipeline that is valid:
// they open the datasets' meta files, which `validate` alone never does, so that it stays a check
// of the files that works where the data is not (CI, a laptop), and a run's data is checked
// before its start-up when asked.
int cmd_validate(const std::vector<std::string>& files, const std::vector<std::string>& overrides,
                 bool print_config, bool data) {
  int status = kExitOk;
  if (print_config) std::cerr << wam::describe_environment();
  for (const auto& file : files) {
    try {
      wam::ValidatedPipeline pipeline = wam::load_pipeline(file, {overrides});
      if (print_config) std::cout << pipeline.effective_config().dump(2) << "\n";
      if (!data) {
        std::cout << "ok: " << file << " (" << pipeline.name() << ", " << pipeline.nodes().size()
                  << " nodes)\n";
        continue;
      }
      const wam::DataCheckResult checked = wam::DataCheckRegistry::builtin().run(pipeline);
      for (const auto& note : checked.notes) std::cout << note << "\n";
      if (!checked.diagnostics.empty()) {
        std::cerr << checked.diagnostics.render();
        print_error_count(file, checked.diagnostics.size(), "data error");
        status = kExitInvalid;
        continue;
      }
      std::cout << "ok: " << file << " (" << pipeline.name() << ", " << pipeline.nodes().size()
                << " nodes, data checked)\n";
    } catch (const wam::ConfigError& e) {
      std::cerr << e.what() << "\n";
      print_error_count(file, e.diagnostics().size(), "error");
      status = kExitInvalid;
    }
  }
  return status;
}

int cmd_stages() {
  const auto& registry = wam::StageRegistry::builtin();
  for (const auto& type : registry.types()) {
    const wam::StageInfo* info = registry.find(type);
    std::cout << std::left << std::setw(20) << type << std::setw(8)
              << (info->kind == wam::StageKind::kSource ? "source" : "stage") << info->summary
              << "\n";
  }
  return kExitOk;
}

int cmd_describe(const std::string& type) {
  const auto& registry = wam::StageRegistry::builtin();
  const wam::StageInfo* info = registry.find(type);
  if (!info) {
    std::cerr << wam::unknown_with_suggestion("stage type", type, registry.types()) << "\n";
    return kExitInvalid;
  }
  std::cout << type << " (" << (info->kind == wam::StageKind::kSource ? "source" : "stage")
            << "): " << info->summary << "\n\nparams:\n";
  auto rows = info->describe();
  size_t name_width = 6, type_width = 6, default_width = 9;
  for (const auto& row : rows) {
    name_width = std::max(name_width, row.name.size() + 2);
    type_width = std::max(type_width, row.type.size() + 2);
    default_width = std::max(default_width, row.default_value.dump().size() + 2);
  }
  std::cout << "  " << std::left << std::setw(name_width) << "name" << std::setw(type_width)
            << "type" << std::setw(default_width) << "default"
            << "constraints / doc\n";
  for (const auto& row : rows) {
    std::cout << "  " << std::left << std::setw(name_width) << row.name << std::setw(type_width)
              << row.type << std::setw(default_width) << row.default_value.dump()
              << (row.constraints.empty() ? "" : "[" + row.constraints + "] ") << row.doc << "\n";
  }
  // The contract with default params.
  wam::Diagnostics diagnostics(type);
  auto stage = info->create(nlohmann::json::object(), "", diagnostics, type, nullptr);
  if (stage) {
    wam::Contract contract;
    stage->declare(contract);
    std::cout << "\ncontract (default params): concurrency "
              << contract.default_concurrency().to_string()
              << (contract.is_order_sensitive() ? ", order-sensitive" : "")
              << (contract.is_batching() ? ", batches its inputs" : "") << "\n";
    for (const auto& f : contract.read_fields()) {
      std::cout << "  reads   " << f.name << ": " << wam::field_type_name(f.type) << "\n";
    }
    for (const auto& f : contract.written_fields()) {
      std::cout << "  writes  " << f.name << ": " << wam::field_type_name(f.type) << "\n";
    }
    for (const auto& f : contract.removed_fields()) std::cout << "  removes " << f << "\n";
  } else {
    std::cout << "\n(contract depends on required params; see the docs above)\n";
  }
  return kExitOk;
}

// Reports a command line CLI11 refused; the exit status.
int parse_error_status(CLI::App& app, const CLI::ParseError& e) {
  // A word where the subcommand goes: name it (CLI11 says only "A subcommand is required").
  if (e.get_exit_code() != 0 && app.get_subcommands().empty() && !app.remaining().empty() &&
      !app.remaining().front().empty() && app.remaining().front()[0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    std::sort(names.begin(), names.end());
    std::cerr << wam::unknown_with_suggestion("subcommand", app.remaining().front(), names)
              << "\nRun with --help for more information.\n";
    return kExitInvalid;
  }
  // CLI11 prints the message (or the help); its own codes (105, 106...) become ours.
  return app.exit(e) == 0 ? kExitOk : kExitInvalid;
}

int cmd_graph(const PipelineArgs& args, const std::string& stats, const std::string& out) {
  wam::ValidatedPipeline pipeline = wam::load_pipeline(args.file, {args.overrides});
  wam::cli::write_graph(pipeline, stats, out);
  return kExitOk;
}

}  // namespace

namespace wam::cli {

namespace {

// Where std::filesystem runs from a LibTorch library (wam/library_binding.h), restarts this
// process once with libstdc++ preloaded ahead of it, what docs/RELIABILITY.md tells a user to do
// by hand; WAM_LIBSTDCXX_PRELOADED marks the restart, and a binding that survives it (or a failed
// exec) is a warning.
void run_std_filesystem_from_libstdcxx(char** argv) {
  const std::string library = std_filesystem_libtorch_library();
  if (library.empty()) return;
  const std::string what = "std::filesystem runs from " + library + ", not libstdc++";
  const char* reference = "docs/RELIABILITY.md, \"Linking against LibTorch\"";
  if (std::getenv("WAM_LIBSTDCXX_PRELOADED") == nullptr) {
    std::cerr << "wam-pipeline: " << what << " (" << reference
              << "): restarting with LD_PRELOAD=libstdc++.so.6" << std::endl;
    const char* preload = std::getenv("LD_PRELOAD");
    const std::string preloads =
        std::string("libstdc++.so.6") + (preload && *preload ? std::string(":") + preload : "");
    setenv("WAM_LIBSTDCXX_PRELOADED", "1", 1);
    setenv("LD_PRELOAD", preloads.c_str(), 1);
    execv("/proc/self/exe", argv);  // returns only when it failed
  }
  std::cerr << "wam-pipeline: warning: " << what
            << ": this binary lists LibTorch ahead of libstdc++ among its shared libraries, and "
               "files it writes may crash it ("
            << reference
            << "). Link it through wam_tensor, whose link options put libstdc++ first, or run "
               "it with LD_PRELOAD=libstdc++.so.6\n";
}

}  // namespace

int run_cli(int argc, char** argv) {
  run_std_filesystem_from_libstdcxx(argv);
  keep_sample_buffers_in_the_heap();
  CLI::App app{
      "wam-pipeline: train robot world action models with a oneTBB flow graph of stages "
      "described in JSON pipeline files.",
      "wam-pipeline"};
  app.set_version_flag("--version", std::string("wam-pipeline ") + WAM_VERSION);
  app.require_subcommand(1);

  RunArgs run_args;
  CLI::App* run = add_run_command(app, run_args);

  std::vector<std::string> validate_files, validate_overrides;
  auto* validate =
      app.add_subcommand("validate", "Check pipeline files; report every problem at once");
  validate->add_option("pipelines", validate_files, "Pipeline JSON files")->required();
  validate->add_option("--set", validate_overrides, "Override a value (path.to.key=VALUE)");
  bool validate_print_config = false;
  validate->add_flag("--print-config", validate_print_config, kPrintConfigHelp);
  bool validate_data = false;
  validate->add_flag("--data", validate_data,
                     "Also check the pipelines against their data, reading only the datasets' "
                     "meta files: camera keys, action/state dims against the layouts, "
                     "normalisation stats; show how each camera maps onto its canvas slot");

  app.add_subcommand("stages", "List the registered stage types");

  std::string describe_type;
  auto* describe = app.add_subcommand("describe", "Show a stage type's params and contract");
  describe->add_option("type", describe_type, "Stage type, e.g. VideoDecode")->required();

  PipelineArgs graph_args;
  std::string graph_out, graph_stats;
  auto* graph = app.add_subcommand("graph", "Draw the pipeline's graph (Graphviz)");
  add_pipeline_args(*graph, graph_args);
  graph->add_option("-o,--output", graph_out,
                    "Output file: .dot, or .svg/.png drawn by Graphviz's dot (default: DOT on "
                    "stdout)");
  graph
      ->add_option("--stats", graph_stats,
                   "A run's statistics (run --stats-out): colour nodes by utilisation, label "
                   "busy %, items/s and queue depths, mark the bottleneck")
      ->check(CLI::ExistingFile);

  const std::vector<std::unique_ptr<Command>> commands = CommandRegistry::builtin().create_all(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_error_status(app, e);
  }

  try {
    if (*run) return cmd_run(run_args);
    if (*validate)
      return cmd_validate(validate_files, validate_overrides, validate_print_config, validate_data);
    if (app.got_subcommand("stages")) return cmd_stages();
    if (*describe) return cmd_describe(describe_type);
    if (*graph) return cmd_graph(graph_args, graph_stats, graph_out);
    for (const auto& command : commands) {
      if (command->selected()) return command->run();
    }
  } catch (const wam::ConfigError& e) {
    std::cerr << e.what() << "\n";
    return kExitInvalid;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory (std::bad_alloc); a batch_size, max_in_flight or a dataset "
                 "shape may be too large for this machine\n";
    return kExitFailed;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace wam::cli
