#include "wam/graph_view.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "wam/error.h"

namespace wam {
namespace {

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, value);
  return buffer;
}

std::string percent(double share) { return format("%.0f%%", 100.0 * share); }

// DOT string literal contents.
std::string quoted(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string concurrency_words(const GraphNode& node, int64_t threads = 0) {
  if (node.concurrency == "serial" || node.concurrency == "1") return "serial";
  if (node.concurrency == "unlimited" && threads > 0) {
    return "concurrency unlimited (" + std::to_string(threads) + " threads)";
  }
  return "concurrency " + node.concurrency;
}

// The node whose input wait the verdict names: the first terminal that is not the source.
const GraphNode* step_of(const GraphAnalysis& graph) {
  for (const auto& node : graph.nodes) {
    if (node.terminal && !node.source) return &node;
  }
  return nullptr;
}

std::string verdict_of(const GraphAnalysis& graph) {
  if (!graph.bottleneck) return "";
  const GraphNode& b = graph.nodes[*graph.bottleneck];
  const GraphNode* step = step_of(graph);
  std::string text;
  if (step == &b) {
    double other = 0;
    for (const auto& node : graph.nodes) {
      if (&node != step) other = std::max(other, node.utilisation);
    }
    text = "the step (" + b.id + ": " + b.type + ") is the bottleneck: " + percent(b.utilisation) +
           " busy";
    if (other > 0) {
      text += "; the data path has " + format("%.1f", 1.0 / other) +
              "x headroom (its busiest node is " + percent(other) + " busy)";
    }
  } else {
    text = b.id + " (" + b.type + ") is the bottleneck: " + percent(b.utilisation) + " busy " +
           (concurrency_words(b) == "serial" ? "(serial)"
                                             : "at " + concurrency_words(b, graph.threads));
    if (step) {
      text += "; " + step->id + " waits on input " + percent(step->starved) + " of the time";
    }
  }
  if (graph.warmup_s > 0) {
    text += "; warm-up left out: the first " + format("%.1f", graph.warmup_s) + " s, until " +
            step->id + "'s first output";
  }
  return text;
}

// A node's column of the stats' series, or nothing when the series lacks it.
std::optional<std::vector<double>> series_column(const nlohmann::json& series,
                                                 const std::string& id, const char* key,
                                                 size_t buckets) {
  const nlohmann::json& nodes = series.at("nodes");
  if (!nodes.contains(id) || !nodes[id].contains(key) || !nodes[id][key].is_array()) return {};
  auto values = nodes[id][key].get<std::vector<double>>();
  if (values.size() != buckets) return {};
  return values;
}

// Replaces the measured nodes' figures with those of the run after its warm-up: the series
// buckets after the one in which the step emitted its first item. Before that the step waits for
// its first input and captures its graph, which on a short run would dominate its waiting share.
// Leaves the whole-run figures when the series cannot tell (no series, or one without starved
// time as older stats files have) or the run ended within the warm-up.
void exclude_warmup(const nlohmann::json& stats, GraphAnalysis& graph) {
  const GraphNode* step = step_of(graph);
  const nlohmann::json series = stats.value("series", nlohmann::json());
  if (!step || !step->measured || !series.is_object() || !series.contains("t") ||
      !series.contains("nodes") || !series["nodes"].is_object()) {
    return;
  }
  const auto t = series["t"].get<std::vector<double>>();
  const auto step_items = series_column(series, step->id, "items", t.size());
  if (!step_items) return;
  size_t first = 0;
  while (first < t.size() && (*step_items)[first] <= 0) ++first;
  if (first + 1 >= t.size()) return;
  const double window = t.back() - t[first];
  if (window <= 0) return;
  std::vector<GraphNode> after = graph.nodes;
  for (auto& node : after) {
    if (!node.measured) continue;
    const auto items = series_column(series, node.id, "items", t.size());
    const auto busy = series_column(series, node.id, "busy_s", t.size());
    const auto starved = series_column(series, node.id, "starved_s", t.size());
    const auto workers = series_column(series, node.id, "concurrency", t.size());
    const auto queue = series_column(series, node.id, "queue", t.size());
    if (!items || !busy || !starved || !workers || !queue) return;
    double out = 0, busy_s = 0, allowed_s = 0, starved_s = 0, queue_s = 0;
    for (size_t k = first + 1; k < t.size(); ++k) {
      const double width = t[k] - t[k - 1];
      out += (*items)[k];
      busy_s += (*busy)[k];
      allowed_s += width * (*workers)[k];
      starved_s += (*starved)[k];
      queue_s += width * (*queue)[k];
    }
    // Busy time lands in the bucket where an item ends, so an item begun in the warm-up can add
    // more than the window holds.
    node.utilisation = allowed_s > 0 ? std::min(1.0, busy_s / allowed_s) : 0.0;
    node.starved = starved_s / window;
    node.items_per_s = out / window;
    node.queue_mean = queue_s / window;
  }
  graph.nodes = std::move(after);
  graph.warmup_s = t[first];
}

}  // namespace

GraphAnalysis graph_of(const ValidatedPipeline& pipeline) {
  GraphAnalysis graph;
  graph.pipeline = pipeline.name();
  for (const auto& node : pipeline.nodes()) {
    GraphNode n;
    n.id = node.id;
    n.type = node.type;
    n.concurrency = node.concurrency.to_string();
    for (size_t input : node.inputs) n.inputs.push_back(pipeline.nodes()[input].id);
    n.source = node.kind == StageKind::kSource;
    n.terminal = node.outputs.empty();
    graph.nodes.push_back(std::move(n));
  }
  return graph;
}

GraphAnalysis analyse_stats(const nlohmann::json& stats,
                            const std::optional<GraphAnalysis>& shape) {
  if (!stats.is_object() || !stats.contains("nodes") || !stats["nodes"].is_array() ||
      !stats.contains("wall_s")) {
    throw Error("not the statistics of a run (expected the JSON of `run --stats-out`)");
  }
  GraphAnalysis graph;
  if (shape) {
    graph = *shape;
  } else {
    graph.pipeline = stats.value("pipeline", "");
    std::vector<std::string> read;
    for (const auto& node : stats["nodes"]) {
      GraphNode n;
      n.id = node.at("id");
      n.type = node.at("type");
      n.concurrency = node.value("concurrency", "serial");
      n.inputs = node.value("inputs", std::vector<std::string>{});
      n.source = n.inputs.empty() && graph.nodes.empty();
      read.insert(read.end(), n.inputs.begin(), n.inputs.end());
      graph.nodes.push_back(std::move(n));
    }
    for (auto& n : graph.nodes) {
      n.terminal = std::find(read.begin(), read.end(), n.id) == read.end();
    }
  }
  graph.wall_s = stats["wall_s"].get<double>();
  graph.threads = stats.value("threads", int64_t(0));
  for (const auto& node : stats["nodes"]) {
    auto it = std::find_if(graph.nodes.begin(), graph.nodes.end(), [&](const GraphNode& n) {
      return n.id == node.at("id").get<std::string>();
    });
    if (it == graph.nodes.end()) continue;
    it->measured = true;
    it->utilisation = node.value("utilisation", 0.0);
    it->starved = graph.wall_s > 0 ? node.value("starved_s", 0.0) / graph.wall_s : 0.0;
    it->items_per_s = graph.wall_s > 0 ? node.value("out", 0.0) / graph.wall_s : 0.0;
    it->queue_mean = node.value("queue_mean", 0.0);
    it->errors = node.value("errors", int64_t(0));
    it->skips = node.value("skips", int64_t(0));
    if (node.contains("concurrency")) it->concurrency = node["concurrency"];
    if (it->concurrency == "auto" && node.contains("concurrency_now")) {
      it->concurrency =
          "auto, " + std::to_string(node["concurrency_now"].get<int64_t>()) + " at the end";
    }
  }
  exclude_warmup(stats, graph);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!graph.nodes[i].measured) continue;
    if (!graph.bottleneck ||
        graph.nodes[i].utilisation > graph.nodes[*graph.bottleneck].utilisation) {
      graph.bottleneck = i;
    }
  }
  graph.verdict = verdict_of(graph);
  return graph;
}

std::string annotated_dot(const GraphAnalysis& graph) {
  std::ostringstream out;
  out << "digraph \"" << quoted(graph.pipeline) << "\" {\n  rankdir=LR;\n"
      << "  node [shape=box, style=\"rounded,filled\", fillcolor=\"white\", "
         "fontname=\"Helvetica\"];\n  edge [fontname=\"Helvetica\", fontsize=10];\n";
  if (!graph.verdict.empty()) {
    out << "  labelloc=t;\n  label=\"" << quoted(graph.pipeline + ": " + graph.verdict) << "\";\n";
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const GraphNode& n = graph.nodes[i];
    const bool bottleneck = graph.bottleneck == i;
    std::string label = (bottleneck ? "BOTTLENECK\\n" : "") + quoted(n.id) + "\\n" + quoted(n.type);
    if (n.measured) {
      label += "\\n" + quoted(concurrency_words(n)) + ", busy " + percent(n.utilisation) + "\\n" +
               format("%.1f items/s", n.items_per_s);
      if (n.skips + n.errors > 0) {
        label +=
            "\\n" + std::to_string(n.skips) + " skipped, " + std::to_string(n.errors) + " errors";
      }
    } else if (n.concurrency != "serial") {
      label += "\\nconcurrency " + quoted(n.concurrency);
    }
    out << "  \"" << quoted(n.id) << "\" [label=\"" << label << "\"";
    if (n.source) out << ", shape=ellipse";
    if (n.measured) {
      // Hue 1/3 (green) when idle down to 0 (red) when saturated.
      const double u = std::clamp(n.utilisation, 0.0, 1.0);
      out << ", fillcolor=\"" << format("%.3f", (1.0 - u) / 3.0) << " 0.45 1.000\"";
    }
    if (bottleneck) out << ", color=\"red\", penwidth=3, fontname=\"Helvetica-Bold\"";
    out << "];\n";
  }
  for (const auto& n : graph.nodes) {
    for (const auto& input : n.inputs) {
      out << "  \"" << quoted(input) << "\" -> \"" << quoted(n.id) << "\"";
      auto from = std::find_if(graph.nodes.begin(), graph.nodes.end(),
                               [&](const GraphNode& g) { return g.id == input; });
      if (n.measured && from != graph.nodes.end() && from->measured) {
        out << " [label=\"" << format("%.1f/s", from->items_per_s) << ", queue "
            << format("%.1f", n.queue_mean) << "\"]";
      }
      out << ";\n";
    }
  }
  out << "}\n";
  return out.str();
}

std::string render_dot(const std::string& dot_text, const std::string& format_name) {
  namespace fs = std::filesystem;
  std::string pattern = (fs::temp_directory_path() / "wam-graph-XXXXXX").string();
  const int fd = mkstemp(pattern.data());
  if (fd < 0) throw Error("cannot create a temporary file for Graphviz");
  close(fd);
  const fs::path input = pattern, output = pattern + ".out";
  std::ofstream(input) << dot_text;
  const pid_t pid = fork();
  if (pid == 0) {
    execlp("dot", "dot", ("-T" + format_name).c_str(), input.c_str(), "-o", output.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid > 0) waitpid(pid, &status, 0);
  std::error_code ec;
  fs::remove(input, ec);
  std::string result;
  {
    std::ifstream in(output, std::ios::binary);
    result.assign(std::istreambuf_iterator<char>(in), {});
  }
  fs::remove(output, ec);
  if (pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) == 127) {
    throw Error("cannot run Graphviz's `dot` to draw " + format_name +
                ": install graphviz (scripts/setup.sh), or write .dot");
  }
  if (WEXITSTATUS(status) != 0 || result.empty()) {
    throw Error("Graphviz's `dot -T" + format_name + "` failed (exit " +
                std::to_string(WEXITSTATUS(status)) + ")");
  }
  return result;
}

}  // namespace wam
