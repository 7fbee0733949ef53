// `graph` (its drawing; the command's options live with the framework's in app.cc) and `report`.
// app.cc calls write_graph, which links this file and so the report command's registrar.
#include "cli/view_commands.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "wam/error.h"
#include "wam/graph_view.h"
#include "wam/metrics.h"

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
