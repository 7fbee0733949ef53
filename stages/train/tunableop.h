// Where the compiled step keeps TunableOp's GEMM tuning results, so that `wam-pipeline compile`
// tunes once and TrainStep finds the file again.
#pragma once

#include <string>

#include "models/world_model.h"

namespace wam::train {

// Where TunableOp keeps the GEMM tuning results of this GPU, Torch version and model config:
// $WAM_COMPILE_CACHE/tunableop/<gpu>_torch<version>_<config hash>.csv.
std::string tunableop_results_path(const std::string& gpu_name, const models::MoTConfig& config);
// FNV-1a 64 of the config's canonical JSON, as 16 hex digits (stable across runs and builds).
std::string config_hash(const models::MoTConfig& config);

}  // namespace wam::train
