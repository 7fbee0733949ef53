#include "models/bf16_weights.h"

#include <algorithm>
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

at::Tensor concatenated_bf16_weights(at::TensorList tensors) {
  std::vector<at::Tensor> parts;
  for (const at::Tensor& tensor : tensors) parts.push_back(weight_in(tensor, at::kBFloat16));
  const at::Tensor& first = parts.front();
  std::vector<int64_t> sizes = first.sizes().vec();
  const int64_t row = first.numel() / std::max<int64_t>(first.size(0), 1);  // elements a row
  bool adjacent = true;
  int64_t rows = 0;
  for (const at::Tensor& part : parts) {
    adjacent = adjacent && part.is_contiguous() && part.dim() == first.dim() &&
               part.sizes().slice(1) == first.sizes().slice(1) &&
               part.storage().unsafeGetStorageImpl() == first.storage().unsafeGetStorageImpl() &&
               part.storage_offset() == first.storage_offset() + rows * row;
    rows += part.size(0);
  }
  if (!adjacent) return at::cat(parts);
  sizes[0] = rows;
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t d = sizes.size() - 1; d > 0; --d) strides[d - 1] = strides[d] * sizes[d];
  return first.as_strided(sizes, strides);
}

}  // namespace wam::models
