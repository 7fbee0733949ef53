// Where a stage runs, with one meaning of "auto" for every stage: a stage's "auto" follows
// settings.device, and settings' "auto" means CUDA when this process sees a CUDA device. So
// `settings.device: cpu` keeps the whole run on the CPU, encoders included, and a stage's own
// "cpu" or "cuda" still overrides the run's choice for that stage alone.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "wam/stage.h"

namespace wam {

// `stage_device` and `settings.device` are "auto", "cpu" or "cuda" (cuda:LOCAL_RANK under a
// launcher, common/distributed.h, else cuda:0). "cuda" without a CUDA device
// is an error naming `who` and the setting that asked for it.
at::Device resolve_device(const std::string& stage_device, const Settings& settings,
                          const std::string& who);

// The same rules with CUDA's availability given, for tests without a GPU.
at::Device resolve_device(const std::string& stage_device, const std::string& settings_device,
                          bool cuda_available, const std::string& who);

}  // namespace wam
