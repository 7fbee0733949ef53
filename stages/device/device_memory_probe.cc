// Installs the live view's device memory probe: bytes the CUDA caching allocator has handed out on
// the current device, when this build has CUDA and the machine a GPU.
#include "wam/live_view.h"

#if WAM_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace wam::stages {
namespace {

[[maybe_unused]] const bool registered = [] {
  set_device_memory_probe([]() -> std::optional<int64_t> {
    if (c10::cuda::device_count() == 0) return std::nullopt;
    return c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device())
        .allocated_bytes[0]
        .current;
  });
  return true;
}();

}  // namespace
}  // namespace wam::stages
#endif
