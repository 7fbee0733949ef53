// `wam-pipeline validate --data`: checks of a validated pipeline against the data it names. Core
// knows no data format: the stages that read data register their checks here (like stages and
// commands register), and a check opens only what is cheap to read, such as a dataset's meta
// files, never a video frame or a column.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "wam/error.h"
#include "wam/pipeline.h"

namespace wam {

struct DataCheckResult {
  Diagnostics diagnostics;         // the data does not fit: `file:/json/pointer [node]: message`
  std::vector<std::string> notes;  // what was found, one line each
};

// Adds what it finds to `result`; throws nothing for a problem of the data.
using DataCheck = std::function<void(const ValidatedPipeline& pipeline, DataCheckResult& result)>;

class DataCheckRegistry {
 public:
  void add(std::string name, DataCheck check);  // throws wam::Error on a duplicate name
  // Every check, in name order; the diagnostics name the pipeline's file.
  DataCheckResult run(const ValidatedPipeline& pipeline) const;

  // The process-wide registry of the checks linked into this binary.
  static DataCheckRegistry& builtin();

 private:
  std::map<std::string, DataCheck> checks_;
};

}  // namespace wam

#define WAM_REGISTER_DATA_CHECK(name, function)                         \
  [[maybe_unused]] static const bool wam_data_check_registered_##name = \
      (::wam::DataCheckRegistry::builtin().add(#name, function), true)
