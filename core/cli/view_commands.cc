// `graph` (its drawing; the command's options live with the framework's in app.cc) and `report`.
// app.cc calls write_graph, which links this file and so the report command's registrar.
#include "cli/view_commands.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli/command.h"
#include "cli/validators.h"
#include "wam/atomic_file.h"
#include "wam/error.h"
#include "wam/graph_view.h"
#include "wam/metrics.h"
#include "wam/report.h"

namespace wam::cli {
namespace {

nlohmann::json read_json(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw Error(file + ": cannot read file");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(file + ": malformed JSON: " + e.what());
  }
}

std::string extension(const std::string& file) {
  std::string ext = std::filesystem::path(file).extension().string();
  for (auto& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

// `wam-pipeline report F.json [-o report.html]`.
class ReportCommand final : public Command {
 public:
  static constexpr std::string_view kName = "report";
  explicit ReportCommand(CLI::App& app) {
    command_ = app.add_subcommand(
        "report",
        "Write a self-contained HTML report of a run (run --stats-out): the verdict, the "
        "annotated graph, throughput and queue depth over time, the summary table");
    command_->add_option("stats", stats_, "A run's statistics JSON (run --stats-out)")
        ->required()
        ->check(CLI::ExistingFile);
    command_->add_option("-o,--output", out_, "The HTML file to write")
        ->capture_default_str()
        ->check(in_existing_directory());
  }
  bool selected() const override { return command_->parsed(); }
  int run() override {
    const nlohmann::json stats = read_json(stats_);
    GraphAnalysis graph;
    try {
      graph = analyse_stats(stats);
    } catch (const Error& e) {
      throw Error(stats_ + ": " + e.what());
    }
    std::string svg;
    try {
      svg = render_dot(annotated_dot(graph), "svg");
    } catch (const Error& e) {
      std::cerr << "warning: " << e.what() << "; the report shows the graph as DOT text\n";
    }
    write_file_atomically(out_, html_report(stats, svg));
    std::cerr << "wrote " << out_ << "\n";
    if (!graph.verdict.empty()) std::cout << graph.verdict << "\n";
    return kExitOk;
  }

 private:
  CLI::App* command_ = nullptr;
  std::string stats_, out_ = "report.html";
};
WAM_REGISTER_COMMAND(ReportCommand);

}  // namespace

void write_graph(const ValidatedPipeline& pipeline, const std::string& stats_file,
                 const std::string& out) {
  GraphAnalysis graph = graph_of(pipeline);
  if (!stats_file.empty()) {
    try {
      graph = analyse_stats(read_json(stats_file), graph);
    } catch (const Error& e) {
      throw Error("--stats " + stats_file + ": " + e.what());
    }
  }
  const std::string dot = annotated_dot(graph);
  if (out.empty()) {
    std::cout << dot;
  } else {
    const std::string ext = extension(out);
    if (ext == ".svg" || ext == ".png") {
      write_file_atomically(out, render_dot(dot, ext.substr(1)));
    } else {
      write_file_atomically(out, dot);
    }
    std::cerr << "wrote " << out << "\n";
  }
  if (!graph.verdict.empty()) std::cerr << graph.verdict << "\n";
}

}  // namespace wam::cli
