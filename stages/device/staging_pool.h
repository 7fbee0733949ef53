// The pinned staging pool of HostToDevice's pinned mode: buffers of pinned host memory and device
// memory that batches cross through. The pool is the flow-control token: a buffer returns to the
// pool only when the last view of it is dropped downstream, and acquire() waits while every
// buffer is held. CUDA builds only.
#pragma once

#if WAM_WITH_CUDA
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>

namespace wam::stages {

// Pinned host + device staging buffers, shared with the deleters of the emitted views (which may
// outlive the stage).
class StagingPool {
 public:
  struct Buffer {
    at::Tensor host;    // pinned uint8
    at::Tensor device;  // uint8
    at::cuda::CUDAEvent released;
    bool used = false;
    int64_t views = 0;  // emitted views still alive
  };

  StagingPool(at::Device device, int64_t count, int64_t host_bytes, int64_t device_bytes);

  // Blocks until a buffer is free; `waited` tells whether it had to.
  size_t acquire(bool& waited);

  Buffer& buffer(size_t index) { return *buffers_[index]; }

  void allocate(Buffer& buffer, int64_t host_bytes, int64_t device_bytes);

  // A view of the buffer's device memory; the buffer returns to the pool when the last one dies.
  at::Tensor view(const std::shared_ptr<StagingPool>& self, size_t index, int64_t offset,
                  at::IntArrayRef sizes, at::ScalarType dtype);

 private:
  void release_view(size_t index);

  at::Device device_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::deque<size_t> free_;
  std::mutex mutex_;
  std::condition_variable cv_;
};

}  // namespace wam::stages
#endif
