// Overrides shared by the commands that run a training pipeline to measure or prepare it (bench,
// compile) rather than to train: no training state written, none resumed.
#pragma once

#include <string>
#include <vector>

namespace wam::cli {

// Appends to `overrides` what keeps the TrainStep node `step_id` from saving or resuming.
inline void add_no_training_state_overrides(const std::string& step_id,
                                            std::vector<std::string>& overrides) {
  const std::string params = "nodes." + step_id + ".params.";
  for (const char* reset : {"checkpoint_dir=\"\"", "save_every=0", "resume=\"\""}) {
    overrides.push_back(params + reset);
  }
}

}  // namespace wam::cli
