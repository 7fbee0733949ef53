// Data-parallel training as torch.nn.parallel.DistributedDataParallel does it: every rank runs the
// same model on its own batch, and the gradients are averaged across ranks in buckets while the
// backward pass is still running, so the optimizer step sees the same gradients on every rank.
//
// Each parameter's gradient accumulator gets a post hook (the hook DDP's Reducer uses). Parameters
// are bucketed in reverse registration order, about the order backward produces their gradients;
// when the last gradient of a bucket is in, the bucket's all-reduce is launched (asynchronously,
// always in bucket order so every rank issues the same sequence of collectives). The first
// backward only counts how often each accumulator fires (more than once for a parameter used
// twice, or recomputed under activation checkpointing); it and any parameter without a gradient
// are reduced at the end of the backward. Averaged gradients are views into the bucket buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/distributed.h"
#include "train/step_runner.h"

namespace torch::autograd {
struct Node;
}

namespace wam::train {

class GradientAverager final : public GradientSync {
 public:
  // Hooks every parameter that requires a gradient. DDP's default bucket is 25 MiB.
  GradientAverager(const std::vector<std::pair<std::string, at::Tensor>>& named_params,
                   dist::World& world, int64_t bucket_bytes = int64_t{25} << 20);
  ~GradientAverager() override;
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  void begin_backward() override;
  // Launches the buckets still waiting, waits for every all-reduce and sets each parameter's
  // .grad() to the average over the ranks (deferred: to its share in the buckets, which
  // reduce_deferred() then all-reduces in place).
  void finish_backward() override;
  // Deferred: backward only copies gradients into the buckets; no collective until
  // reduce_deferred() (the compiled step's collectives outside its graphs).
  void set_deferred(bool deferred) override { deferred_ = deferred; }
  void reduce_deferred() override;
  // Drops the accumulator nodes it holds (and its hooks) and hooks new ones, made on the current
  // stream (DDP's CUDA-graph recipe constructs DDP on the capture stream for the same reason).
  void rehook_on_current_stream() override;

  int64_t bucket_count() const { return static_cast<int64_t>(buckets_.size()); }
  // Buckets whose all-reduce was launched before the last backward pass had returned.
  int64_t overlapped_buckets() const { return overlapped_; }

 private:
  struct Slot {
    std::string name;
    at::Tensor param;
    size_t bucket = 0;
    int64_t offset = 0;    // in the bucket's buffer, in elements
    int64_t expected = 0;  // accumulator calls per backward, learned from the first one
    int64_t fired = 0;     // accumulator calls in this backward
    bool ready = false;
    std::shared_ptr<torch::autograd::Node> accumulator;
    uintptr_t hook_key = 0;
  };

  struct Bucket {
    std::vector<size_t> slots;
    at::Tensor buffer;  // flat; each slot's gradient / world size at its offset
    int64_t waiting = 0;
    bool launched = false;
    dist::Pending reduce;
  };
  class Hook;
  void on_accumulated(size_t slot);
  void mark_ready(size_t slot);
  void launch_ready_buckets();
  void launch(size_t bucket);  // its all-reduce, asynchronously
  void hook();
  void unhook();

  dist::World& world_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::mutex mutex_;
  bool learned_ = false;  // the first backward counted the accumulator calls
  bool in_backward_ = false;
  bool deferred_ = false;
  size_t next_launch_ = 0;  // buckets are launched in index order
  int64_t overlapped_ = 0;
};

}  // namespace wam::train
