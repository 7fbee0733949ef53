#include "train/data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "wam/error.h"

namespace wam::train {

class GradientAverager::Hook final : public torch::autograd::FunctionPostHook {
 public:
  Hook(GradientAverager* owner, size_t slot) : owner_(owner), slot_(slot) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    owner_->on_accumulated(slot_);
    return outputs;
  }

 private:
  GradientAverager* owner_;
  size_t slot_;
};

GradientAverager::GradientAverager(
    const std::vector<std::pair<std::string, at::Tensor>>& named_params, dist::World& world,
    int64_t bucket_bytes)
    : world_(world) {
  for (auto it = named_params.rbegin(); it != named_params.rend(); ++it) {
    if (!it->second.requires_grad()) continue;
    Slot slot;
    slot.name = it->first;
    slot.param = it->second;
    slots_.push_back(std::move(slot));
  }
  // Reverse registration order; a new bucket at the size cap or where dtype or device change.
  int64_t bytes = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const at::Tensor& p = slots_[i].param;
    const bool fresh =
        buckets_.empty() || bytes >= bucket_bytes ||
        p.scalar_type() != slots_[buckets_.back().slots.front()].param.scalar_type() ||
        p.device() != slots_[buckets_.back().slots.front()].param.device();
    if (fresh) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& bucket = buckets_.back();
    slots_[i].bucket = buckets_.size() - 1;
    slots_[i].offset = bytes / static_cast<int64_t>(p.element_size());
    bucket.slots.push_back(i);
    bytes += p.numel() * static_cast<int64_t>(p.element_size());
  }
  for (Bucket& bucket : buckets_) {
    const Slot& last = slots_[bucket.slots.back()];
    bucket.buffer = at::zeros({last.offset + last.param.numel()}, last.param.options());
  }
  hook();
}

GradientAverager::~GradientAverager() { unhook(); }

void GradientAverager::hook() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    slots_[i].accumulator = torch::autograd::impl::grad_accumulator(slots_[i].param);
    slots_[i].hook_key = slots_[i].accumulator->add_post_hook(std::make_unique<Hook>(this, i));
  }
}

void GradientAverager::unhook() {
  for (Slot& slot : slots_) {
    if (!slot.accumulator) continue;
    slot.accumulator->del_post_hook(slot.hook_key);
    slot.accumulator.reset();
  }
}

void GradientAverager::rehook_on_current_stream() {
  unhook();  // the nodes die with the last reference: no autograd graph is alive between steps
  hook();
}

void GradientAverager::begin_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Bucket& bucket : buckets_) {
    if (bucket.reduce.valid()) bucket.reduce.wait();  // a step abandoned by an exception
    bucket.waiting = static_cast<int64_t>(bucket.slots.size());
    bucket.launched = false;
  }
  for (Slot& slot : slots_) {
    slot.fired = 0;
    slot.ready = false;
  }
  next_launch_ = 0;
  in_backward_ = true;
  if (!learned_) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].expected == 0) mark_ready(i);  // no gradient expected: zeros
  }
}

void GradientAverager::on_accumulated(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!in_backward_) return;  // a backward outside the training step (e.g. a test's own)
  Slot& slot = slots_[index];
  ++slot.fired;
  if (!learned_) return;
  if (slot.fired > slot.expected) {
    throw Error("data-parallel step (" + world_.describe() + "): parameter " + slot.name +
                " got its gradient " + std::to_string(slot.fired) +
                " times in this backward pass but " + std::to_string(slot.expected) +
                " times in the first; averaging gradients across ranks needs the same graph "
                "every step");
  }
  if (slot.fired == slot.expected) {
    mark_ready(index);
    launch_ready_buckets();
  }
}

void GradientAverager::mark_ready(size_t index) {
  Slot& slot = slots_[index];
  if (slot.ready) return;
  Bucket& bucket = buckets_[slot.bucket];
  torch::NoGradGuard no_grad;
  at::Tensor target = bucket.buffer.narrow(0, slot.offset, slot.param.numel());
  const at::Tensor& grad = slot.param.grad();
  if (grad.defined()) {
    target.copy_(grad.reshape({-1}));
    target.div_(static_cast<double>(world_.size()));
  } else {
    target.zero_();
  }
  slot.ready = true;
  --bucket.waiting;
}

void GradientAverager::launch_ready_buckets() {
  if (deferred_) return;
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].waiting == 0) {
    launch(next_launch_);
    ++next_launch_;
  }
}

void GradientAverager::launch(size_t index) {
  Bucket& bucket = buckets_[index];
  bucket.reduce = world_.all_reduce_sum_async({bucket.buffer}, "all_reduce of gradient bucket " +
                                                                   std::to_string(index) + "/" +
                                                                   std::to_string(buckets_.size()));
  bucket.launched = true;
}

void GradientAverager::finish_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  in_backward_ = false;
  overlapped_ = static_cast<int64_t>(next_launch_);
  if (!learned_) {
    for (Slot& slot : slots_) slot.expected = slot.fired;
    learned_ = true;
  }
  for (size_t i = 0; i < slots_.size(); ++i) mark_ready(i);
  launch_ready_buckets();
  for (Bucket& bucket : buckets_) bucket.reduce.wait();
  for (Slot& slot : slots_) {
    slot.param.mutable_grad() =
        buckets_[slot.bucket].buffer.narrow(0, slot.offset, slot.param.numel()).view_as(slot.param);
  }
}

void GradientAverager::reduce_deferred() {
  if (!deferred_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < buckets_.size(); ++i) launch(i);
  for (Bucket& bucket : buckets_) bucket.reduce.wait();
}

}  // namespace wam::train
