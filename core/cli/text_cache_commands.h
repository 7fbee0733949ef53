// `wam-pipeline text-cache build PIPELINE [--set ...]`: fills the HDF5 text cache that the
// pipeline's TextEmbed node reads, with the T5 prompt of every task of the datasets its
// EpisodeSampler nodes read.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace wam::cli {

// Adds the `text-cache` command to `app`; after parsing, selected() says whether it was chosen and
// run() executes it, returning the process exit status.
class TextCacheCommands {
 public:
  explicit TextCacheCommands(CLI::App& app);
  bool selected() const;
  int run() const;

 private:
  CLI::App* text_cache_ = nullptr;
  CLI::App* build_ = nullptr;
  std::string pipeline_;
  std::vector<std::string> overrides_;
};

}  // namespace wam::cli
