// The commands that show a run after the fact: `graph` with a run's figures, and `report`.
#pragma once

#include <string>

#include "wam/pipeline.h"

namespace wam::cli {

// `graph PIPELINE [--stats F.json] [-o F.dot|F.svg|F.png]`: DOT on stdout without `out`; else
// DOT, SVG or PNG by the file's extension (SVG and PNG drawn by Graphviz's dot).
void write_graph(const ValidatedPipeline& pipeline, const std::string& stats_file,
                 const std::string& out);

}  // namespace wam::cli
