#include "models/token_split.h"

#include <numeric>

#include "wam/error.h"

#if WAM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif
#if WAM_FUSED_KERNELS
#include "kernels/row_copy.h"
#endif

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A part of x [B, N, W] (rows contiguous, W elements each) as a contiguous tensor of its own. On
// CUDA one two-dimensional copy, B rows of the part's n x W elements: ATen's copy of such a view
// runs its strided, unvectorised kernel (1.5 TB/s on the H200; docs/KERNELS.md, version 21).
at::Tensor contiguous_part(const at::Tensor& view) {
#if WAM_WITH_CUDA
  const int64_t row_elements = view.size(1) * view.size(2);
  if (view.is_cuda() && view.stride(2) == 1 && view.stride(1) == view.size(2) && view.size(0) > 0 &&
      row_elements > 0) {
    const c10::cuda::CUDAGuard guard(view.device());
    at::Tensor out = at::empty(view.sizes(), view.options());
    const size_t bytes = static_cast<size_t>(row_elements) * view.element_size();
    C10_CUDA_CHECK(cudaMemcpy2DAsync(out.data_ptr(), bytes, view.data_ptr(),
                                     static_cast<size_t>(view.stride(0)) * view.element_size(),
                                     bytes, static_cast<size_t>(view.size(0)),
                                     cudaMemcpyDeviceToDevice,
                                     at::cuda::getCurrentCUDAStream().stream()));
    return out;
  }
#endif
  return view.clone(at::MemoryFormat::Contiguous);
}

// Saves nothing: the backward is the parts' gradients concatenated (autograd materialises a part
// that received none as zeros).
class TokenSplit : public torch::autograd::Function<TokenSplit> {
 public:
  static variable_list forward(AutogradContext* /*ctx*/, const at::Tensor& x,
                               const std::vector<int64_t>& sizes) {
    variable_list parts;
    for (const at::Tensor& view : x.split_with_sizes(sizes, 1)) {
      parts.push_back(contiguous_part(view));
    }
    return parts;
  }

  static variable_list backward(AutogradContext* /*ctx*/, variable_list grads) {
    return {at::cat(grads, 1), at::Tensor()};
  }
};

}  // namespace

void copy_token_rows(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.dim() != 3 || dst.sizes() != src.sizes() || dst.scalar_type() != src.scalar_type()) {
    throw Error(c10::str("copy_token_rows: dst ", dst.sizes(), " ", dst.scalar_type(), " and src ",
                         src.sizes(), " ", src.scalar_type(),
                         " are not views of the same [B, R, W] sizes and dtype"));
  }
#if WAM_FUSED_KERNELS
  const int64_t element = dst.element_size();
  const kernels::RowLayout dst_layout{dst.stride(0) * element, dst.stride(1) * element},
      src_layout{src.stride(0) * element, src.stride(1) * element};
  if (dst.is_cuda() && src.is_cuda() && dst.device() == src.device() && dst.stride(2) == 1 &&
      src.stride(2) == 1 &&
      kernels::copy_rows_supports(dst.data_ptr(), dst_layout, src.data_ptr(), src_layout,
                                  dst.size(0), dst.size(1), dst.size(2) * element)) {
    const c10::cuda::CUDAGuard guard(dst.device());
    kernels::copy_rows(dst.data_ptr(), dst_layout, src.data_ptr(), src_layout, dst.size(0),
                       dst.size(1), dst.size(2) * element,
                       at::cuda::getCurrentCUDAStream().stream());
    return;
  }
#endif
  dst.copy_(src);
}

std::vector<at::Tensor> split_tokens(const at::Tensor& x, const std::vector<int64_t>& sizes) {
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  if (x.dim() != 3 || total != x.size(1)) {
    throw Error(c10::str("split_tokens: x ", x.sizes(), " does not split into token counts ",
                         at::IntArrayRef(sizes), " ([B, N, W] with the counts summing to N)"));
  }
  return TokenSplit::apply(x, sizes);
}

}  // namespace wam::models
