#include "models/bf16_weights.h"

#include <mutex>
#include <unordered_map>

namespace wam::models {
namespace {

struct KeptCopy {
  at::Tensor weight;  // held, so that no other tensor takes its address while the entry lives
  at::Tensor copy;
  uint32_t version = 0;  // the weight's version counter when the copy was last filled
};

std::mutex copies_mutex;
std::unordered_map<const c10::TensorImpl*, KeptCopy>& copies() {
  static std::unordered_map<const c10::TensorImpl*, KeptCopy> kept;
  return kept;
}

void fill(KeptCopy& kept) {
  torch::NoGradGuard no_grad;
  kept.copy.copy_(kept.weight);
  kept.version = kept.weight._version();
}

}  // namespace

void keep_bf16_copy(const at::Tensor& weight, const at::Tensor& copy) {
  TORCH_CHECK(copy.scalar_type() == at::kBFloat16 && copy.sizes() == weight.sizes() &&
                  copy.device() == weight.device(),
              "keep_bf16_copy: the copy must be bfloat16 of the weight's shape and device");
  const std::lock_guard<std::mutex> lock(copies_mutex);
  KeptCopy& kept = copies()[weight.unsafeGetTensorImpl()];
  kept = {weight, copy, 0};
  fill(kept);
}

void drop_bf16_copy(const at::Tensor& weight) {
  const std::lock_guard<std::mutex> lock(copies_mutex);
  copies().erase(weight.unsafeGetTensorImpl());
}

at::Tensor weight_in(const at::Tensor& weight, at::ScalarType dtype) {
  if (dtype == at::kBFloat16 && weight.scalar_type() == at::kFloat) {
    const std::lock_guard<std::mutex> lock(copies_mutex);
    const auto found = copies().find(weight.unsafeGetTensorImpl());
    if (found != copies().end()) {
      if (found->second.version != weight._version()) fill(found->second);
      return found->second.copy;
    }
  }
  return weight.to(dtype);
}

}  // namespace wam::models
