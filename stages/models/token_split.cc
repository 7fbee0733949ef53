#include "models/token_split.h"

#include <numeric>

#include "wam/error.h"

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Saves nothing: the backward is the parts' gradients concatenated (autograd materialises a part
// that received none as zeros).
class TokenSplit : public torch::autograd::Function<TokenSplit> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/, const at::Tensor& x,
                               const std::vector<int64_t>& sizes) {
    variable_list parts;
    for (const at::Tensor& view : x.split_with_sizes(sizes, 1)) {
      parts.push_back(view.clone(at::MemoryFormat::Contiguous));
    }
    return parts;
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list grads) {
    return {at::cat(grads, 1), at::Tensor()};
  }
};

}  // namespace

std::vector<at::Tensor> split_tokens(const at::Tensor& x, const std::vector<int64_t>& sizes) {
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  if (x.dim() != 3 || total != x.size(1)) {
    throw Error(c10::str("split_tokens: x ", x.sizes(), " does not split into token counts ",
                         at::IntArrayRef(sizes), " ([B, N, W] with the counts summing to N)"));
  }
  return TokenSplit::apply(x, sizes);
}

}  // namespace wam::models
