#include "wam/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "wam/graph_view.h"

namespace wam {
namespace {

constexpr const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string number(double value, const char* pattern = "%.3g") {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), pattern, value);
  return buffer;
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<double>& x,
                           const std::vector<ChartSeries>& series) {
  const double width = 760, height = 260, left = 60, right = 170, top = 28, bottom = 40;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  double x_max = 0, y_max = 0;
  for (double v : x) x_max = std::max(x_max, v);
  for (const auto& s : series) {
    for (double v : s.values) {
      if (std::isfinite(v)) y_max = std::max(y_max, v);
    }
  }
  if (x_max <= 0) x_max = 1;
  y_max = y_max > 0 ? y_max * 1.05 : 1;
  auto px = [&](double v) { return left + plot_w * v / x_max; };
  auto py = [&](double v) { return top + plot_h * (1 - v / y_max); };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << width
      << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
      << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
      << "<title>" << html_escape(title) << "</title>\n"
      << "<rect x=\"0\" y=\"0\" width=\"" << width << "\" height=\"" << height
      << "\" fill=\"white\"/>\n"
      << "<text x=\"" << left << "\" y=\"16\" font-size=\"13\" font-weight=\"bold\">"
      << html_escape(title) << "</text>\n";
  // Grid and ticks: 5 steps on each axis.
  for (int k = 0; k <= 5; ++k) {
    const double yv = y_max * k / 5, xv = x_max * k / 5;
    svg << "<line x1=\"" << left << "\" y1=\"" << py(yv) << "\" x2=\"" << left + plot_w
        << "\" y2=\"" << py(yv) << "\" stroke=\"#e5e5e5\"/>\n"
        << "<text x=\"" << left - 6 << "\" y=\"" << py(yv) + 4 << "\" text-anchor=\"end\">"
        << number(yv) << "</text>\n"
        << "<text x=\"" << px(xv) << "\" y=\"" << top + plot_h + 15 << "\" text-anchor=\"middle\">"
        << number(xv) << "</text>\n";
  }
  svg << "<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << left + plot_w
      << "\" y2=\"" << top + plot_h << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\""
      << top + plot_h << "\" stroke=\"black\"/>\n"
      << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 6
      << "\" text-anchor=\"middle\">" << html_escape(x_label) << "</text>\n"
      << "<text transform=\"translate(14," << top + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << html_escape(y_label) << "</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* colour = kColours[s % std::size(kColours)];
    svg << "<polyline class=\"series\" data-name=\"" << html_escape(series[s].name)
        << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"1.8\" points=\"";
    for (size_t k = 0; k < x.size() && k < series[s].values.size(); ++k) {
      if (!std::isfinite(series[s].values[k])) continue;
      svg << number(px(x[k]), "%.1f") << "," << number(py(series[s].values[k]), "%.1f") << " ";
    }
    svg << "\"/>\n";
    const double ly = top + 8 + 16 * double(s);
    svg << "<line x1=\"" << left + plot_w + 12 << "\" y1=\"" << ly << "\" x2=\""
        << left + plot_w + 32 << "\" y2=\"" << ly << "\" stroke=\"" << colour
        << "\" stroke-width=\"3\"/>\n"
        << "<text x=\"" << left + plot_w + 38 << "\" y=\"" << ly + 4 << "\">"
        << html_escape(series[s].name) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

namespace {

// The page's head and style, the run's one-line summary, any error and the verdict.
void write_head(std::ostream& html, const nlohmann::json& stats, const GraphAnalysis& graph) {
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
       << html_escape(graph.pipeline) << ": wam-pipeline run report</title>\n<style>\n"
       << "body { font-family: Helvetica, Arial, sans-serif; margin: 24px; color: #222; }\n"
       << ".verdict { font-size: 1.25em; padding: 10px 14px; background: #fff4e5; "
          "border-left: 5px solid #d62728; }\n"
       << "table { border-collapse: collapse; font-size: 0.9em; }\n"
       << "th, td { padding: 4px 10px; border-bottom: 1px solid #ddd; text-align: right; }\n"
       << "th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) { text-align: left; }\n"
       << "tr.bottleneck td { font-weight: bold; color: #b00; }\n"
       << ".graph svg { max-width: 100%; height: auto; }\n</style>\n</head>\n<body>\n";
  html << "<h1>" << html_escape(graph.pipeline) << "</h1>\n<p class=\"summary\">"
       << number(graph.wall_s, "%.2f") << " s on " << stats.value("threads", int64_t(0))
       << " threads; stopped: " << html_escape(stats.value("stop_reason", "")) << "</p>\n";
  if (stats.contains("error")) {
    html << "<p class=\"error\">error: " << html_escape(stats["error"].dump()) << "</p>\n";
  }
  html << "<p class=\"verdict\" id=\"verdict\">"
       << html_escape(graph.verdict.empty() ? "no node was measured" : graph.verdict) << "</p>\n";
  if (graph.warmup_s > 0) {
    html << "<p class=\"warmup\" id=\"warmup\">The verdict and the graph leave out the warm-up: "
            "the first "
         << number(graph.warmup_s, "%.1f")
         << " s, until the step's first output (its first input's way through the data path, "
            "graph capture). The charts and the summary table cover the whole run.</p>\n";
  }
}

// The drawn graph when dot produced one, else the annotated dot source.
void write_graph(std::ostream& html, const GraphAnalysis& graph, const std::string& graph_svg) {
  html << "<h2>Graph</h2>\n<div class=\"graph\">\n";
  const size_t svg_at = graph_svg.find("<svg");
  if (svg_at != std::string::npos) {
    html << graph_svg.substr(svg_at) << "\n";
  } else {
    html << "<p>(Graphviz's dot was not found: install graphviz to draw the graph here.)</p>\n"
         << "<pre>" << html_escape(annotated_dot(graph)) << "</pre>\n";
  }
  html << "</div>\n";
}

// Throughput and queue depth per node, the loss and each reported scalar, over the run.
void write_charts(std::ostream& html, const nlohmann::json& stats, const GraphAnalysis& graph) {
  html << "<h2>Over time</h2>\n";
  const nlohmann::json series = stats.value("series", nlohmann::json());
  if (!series.is_object() || !series.contains("t") || series["t"].empty()) {
    html << "<p>(These stats carry no time series.)</p>\n";
    return;
  }
  const auto ends = series["t"].get<std::vector<double>>();
  std::vector<double> t;  // bucket midpoints
  for (size_t k = 0; k < ends.size(); ++k) t.push_back((ends[k] + (k ? ends[k - 1] : 0.0)) / 2);
  std::vector<ChartSeries> rates, queues;
  for (const auto& node : graph.nodes) {
    if (!series["nodes"].contains(node.id)) continue;
    const auto& s = series["nodes"][node.id];
    const auto items = s.at("items").get<std::vector<double>>();
    ChartSeries rate{node.id, {}};
    for (size_t k = 0; k < t.size() && k < items.size(); ++k) {
      const double width = ends[k] - (k == 0 ? 0.0 : ends[k - 1]);
      rate.values.push_back(width > 0 ? items[k] / width : 0.0);
    }
    rates.push_back(std::move(rate));
    queues.push_back({node.id, s.at("queue").get<std::vector<double>>()});
  }
  html << svg_line_chart("Throughput per node", "seconds", "items/s", t, rates)
       << svg_line_chart("Queue depth per node", "seconds", "items waiting", t, queues);
  const auto& loss = series.value("loss", nlohmann::json());
  if (loss.is_object() && loss.contains("value") && !loss["value"].empty()) {
    html << svg_line_chart("Loss", "step", "loss", loss["step"].get<std::vector<double>>(),
                           {{"loss", loss["value"].get<std::vector<double>>()}});
  }
  const nlohmann::json scalars = series.value("scalars", nlohmann::json::object());
  for (const auto& [name, scalar] : scalars.items()) {
    html << svg_line_chart(name, "step", name, scalar.at("step").get<std::vector<double>>(),
                           {{name, scalar.at("value").get<std::vector<double>>()}});
  }
}

// One row per node, the bottleneck's in bold, then the legend and the end of the page.
void write_summary_table(std::ostream& html, const nlohmann::json& stats,
                         const GraphAnalysis& graph) {
  const double wall = graph.wall_s;
  html << "<h2>Summary</h2>\n<table id=\"summary\">\n<tr><th>node</th><th>type</th>"
       << "<th>concurrency</th><th>in</th><th>out</th><th>items/s</th><th>busy %</th>"
       << "<th>starved %</th><th>blocked %</th><th>queue avg</th><th>queue max</th>"
       << "<th>skips</th><th>errors</th></tr>\n";
  size_t index = 0;
  for (const auto& node : stats["nodes"]) {
    const bool bottleneck = graph.bottleneck == index++;
    auto pct = [&](const char* key) {
      return number(wall > 0 ? 100.0 * node.value(key, 0.0) / wall : 0.0, "%.0f");
    };
    html << "<tr" << (bottleneck ? " class=\"bottleneck\"" : "") << "><td>"
         << html_escape(node.value("id", "")) << "</td><td>" << html_escape(node.value("type", ""))
         << "</td><td>" << html_escape(node.value("concurrency", "")) << "</td><td>"
         << node.value("in", int64_t(0)) << "</td><td>" << node.value("out", int64_t(0))
         << "</td><td>" << number(wall > 0 ? node.value("out", 0.0) / wall : 0.0, "%.1f")
         << "</td><td>" << number(100.0 * node.value("utilisation", 0.0), "%.0f") << "</td><td>"
         << pct("starved_s") << "</td><td>" << pct("blocked_s") << "</td><td>"
         << number(node.value("queue_mean", 0.0), "%.1f") << "</td><td>"
         << node.value("queue_max", int64_t(0)) << "</td><td>" << node.value("skips", int64_t(0))
         << "</td><td>" << node.value("errors", int64_t(0)) << "</td></tr>\n";
  }
  html << "</table>\n<p><small>busy %: busy time over the run's time and the workers the node "
          "could use; starved %: time with nothing to do; blocked %: the source waiting for "
          "room in the graph.</small></p>\n</body>\n</html>\n";
}

}  // namespace

std::string html_report(const nlohmann::json& stats, const std::string& graph_svg) {
  const GraphAnalysis graph = analyse_stats(stats);
  std::ostringstream html;
  write_head(html, stats, graph);
  write_graph(html, graph, graph_svg);
  write_charts(html, stats, graph);
  write_summary_table(html, stats, graph);
  return html.str();
}

}  // namespace wam
