// `wam-pipeline dataset synth|inspect|stats`: make, look at and complete LeRobot-layout datasets.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace wam::cli {

// Adds the `dataset` command and its subcommands to `app`; after parsing, selected() says whether
// one of them was chosen and run() executes it, returning the process exit status.
class DatasetCommands {
 public:
  explicit DatasetCommands(CLI::App& app);
  bool selected() const;
  int run() const;

 private:
  CLI::App* dataset_ = nullptr;
  CLI::App* synth_ = nullptr;
  CLI::App* inspect_ = nullptr;
  CLI::App* stats_ = nullptr;

  std::string preset_ = "libero";
  std::string out_;
  int64_t episodes_ = 4;
  int64_t frames_per_episode_ = 64;
  int fps_ = 0;
  int gop_ = 2;
  std::string codec_ = "av1";
  uint64_t seed_ = 0;
  std::string size_;  // WxH

  std::string dir_;
  bool force_ = false;
  int64_t inspect_episodes_ = 0;  // 0: all
};

}  // namespace wam::cli
