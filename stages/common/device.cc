#include "common/device.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include "common/distributed.h"
#include "wam/error.h"

namespace wam {
namespace {

// Under a launcher each process trains on the GPU of its LOCAL_RANK.
c10::DeviceIndex cuda_index() {
  const dist::LaunchEnv& env = dist::launch_env();
  return static_cast<c10::DeviceIndex>(env.launched() ? env.local_rank : 0);
}

}  // namespace

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
  return cuda_available ? at::Device(at::kCUDA, cuda_index()) : at::Device(at::kCPU);
}

}  // namespace wam
