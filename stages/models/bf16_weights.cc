#include "models/bf16_weights.h"

#include <mutex>
#include <unordered_map>
#include <vector>

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

at::Tensor concatenated_bf16_weights(at::TensorList weights) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& weight : weights) parts.push_back(weight_in(weight, at::kBFloat16));
  const at::Tensor& first = parts.front();
  const int64_t in = first.size(1);
  bool adjacent = true;
  int64_t rows = 0;
  for (const at::Tensor& part : parts) {
    adjacent = adjacent && part.is_contiguous() && part.size(1) == in &&
               part.storage().unsafeGetStorageImpl() == first.storage().unsafeGetStorageImpl() &&
               part.storage_offset() == first.storage_offset() + rows * in;
    rows += part.size(0);
  }
  if (adjacent) return first.as_strided({rows, in}, {in, 1});
  return at::cat(parts);
}

}  // namespace wam::models
