// `wam-pipeline compile PIPELINE`: prepares the compiled step's compiler artifacts (TunableOp GEMM
// results under $WAM_COMPILE_CACHE) by running real training steps of a compiled pipeline, as the
// reference's tools/compile.py prepares its Inductor/Triton caches.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace wam::cli {

class CompileCommand {
 public:
  explicit CompileCommand(CLI::App& app);
  bool selected() const;
  int run() const;

 private:
  CLI::App* compile_ = nullptr;
  std::string file_;
  std::vector<std::string> overrides_;
  int64_t steps_ = 2;
};

}  // namespace wam::cli
