#include "device/staging_pool.h"

#if WAM_WITH_CUDA
#include <chrono>
#include <string>

#include <ATen/cuda/CUDAContext.h>

#include "wam/error.h"

namespace wam::stages {
namespace {

constexpr auto kPoolWaitLimit = std::chrono::seconds(60);

}  // namespace

StagingPool::StagingPool(at::Device device, int64_t count, int64_t host_bytes, int64_t device_bytes)
    : device_(device) {
  for (int64_t i = 0; i < count; ++i) {
    auto buffer = std::make_unique<Buffer>();
    allocate(*buffer, host_bytes, device_bytes);
    buffers_.push_back(std::move(buffer));
    free_.push_back(static_cast<size_t>(i));
  }
}

size_t StagingPool::acquire(bool& waited) {
  std::unique_lock<std::mutex> lock(mutex_);
  waited = free_.empty();
  if (!cv_.wait_for(lock, kPoolWaitLimit, [&] { return !free_.empty(); })) {
    throw Error("HostToDevice: all " + std::to_string(buffers_.size()) +
                " pinned buffers are still held downstream after 60 s; something keeps "
                "batches alive (raise pool_batches, or drop batches once consumed)");
  }
  const size_t index = free_.front();
  free_.pop_front();
  return index;
}

void StagingPool::allocate(Buffer& buffer, int64_t host_bytes, int64_t device_bytes) {
  buffer.host = at::empty({host_bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  buffer.device = at::empty({device_bytes}, at::TensorOptions().dtype(at::kByte).device(device_));
}

at::Tensor StagingPool::view(const std::shared_ptr<StagingPool>& self, size_t index, int64_t offset,
                             at::IntArrayRef sizes, at::ScalarType dtype) {
  Buffer& b = *buffers_[index];
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++b.views;
  }
  return at::from_blob(
      b.device.data_ptr<uint8_t>() + offset, sizes,
      [self, index](void*) { self->release_view(index); },
      at::TensorOptions().dtype(dtype).device(device_));
}

void StagingPool::release_view(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  Buffer& b = *buffers_[index];
  if (--b.views > 0) return;
  b.released.record(at::cuda::getCurrentCUDAStream(device_.index()));
  b.used = true;
  free_.push_back(index);
  cv_.notify_one();
}

}  // namespace wam::stages
#endif
