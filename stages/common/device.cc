#include "common/device.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include "wam/error.h"

namespace wam {

at::Device resolve_device(const std::string& stage_device, const Settings& settings,
                          const std::string& who) {
  return resolve_device(stage_device, settings.device, torch::cuda::is_available(), who);
}

at::Device resolve_device(const std::string& stage_device, const std::string& settings_device,
                          bool cuda_available, const std::string& who) {
  const bool follows_settings = stage_device == "auto";
  const std::string& requested = follows_settings ? settings_device : stage_device;
  if (requested == "cpu") return at::Device(at::kCPU);
  if (requested == "cuda" && !cuda_available) {
    throw Error(who +
                ": device \"cuda\" was requested but this LibTorch (" TORCH_VERSION
                ") sees no CUDA device; set " +
                (follows_settings ? "settings.device" : "param device") +
                " to \"auto\" or \"cpu\"");
  }
  return cuda_available ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
}

}  // namespace wam
