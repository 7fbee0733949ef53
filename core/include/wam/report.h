// `wam-pipeline report`: one self-contained HTML page (no script, no network) about a run, from its
// stats (`run --stats-out`): the verdict, the annotated graph, per-node throughput and queue depth
// over time, the loss, and the summary table.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace wam {

struct ChartSeries {
  std::string name;
  std::vector<double> values;  // one per x
};

// An inline SVG line chart: one polyline per series over `x`, axes with their ranges, a legend.
std::string svg_line_chart(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<double>& x,
                           const std::vector<ChartSeries>& series);

// The page. `graph_svg`: the annotated graph drawn by Graphviz (an <svg> element, with or
// without its XML prolog); empty when Graphviz is missing, and the page says so.
std::string html_report(const nlohmann::json& stats, const std::string& graph_svg);

std::string html_escape(const std::string& text);

}  // namespace wam
