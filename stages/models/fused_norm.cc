#include "models/fused_norm.h"

#include "wam/error.h"

#if WAM_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/rms_norm_rope.h"
#endif

namespace wam::models {

#if WAM_FUSED_KERNELS
namespace {

kernels::RmsNormRopeShape shape_of(const at::Tensor& x, int64_t head_dim) {
  kernels::RmsNormRopeShape shape;
  shape.rows = x.size(0) * x.size(1);
  shape.width = x.size(2);
  shape.head_dim = head_dim;
  shape.tokens = x.size(1);
  shape.x_row_stride = x.stride(1);
  return shape;
}

kernels::Precision precision_of(const at::Tensor& x) {
  return x.scalar_type() == at::kBFloat16 ? kernels::Precision::kBFloat16
                                          : kernels::Precision::kFloat32;
}

const float* pairs_or_null(const at::Tensor& rotation_pairs) {
  return rotation_pairs.numel() > 0 ? rotation_pairs.data_ptr<float>() : nullptr;
}

class FusedRmsNormRope : public torch::autograd::Function<FusedRmsNormRope> {
 public:
  // rotation_pairs: float [N, head_dim / 2, 2] (cos, sin), or empty for no RoPE (autograd takes
  // no undefined inputs).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, const at::Tensor& rotation_pairs,
                            int64_t head_dim, double eps) {
    const c10::cuda::CUDAGuard guard(x.device());
    const kernels::RmsNormRopeShape shape = shape_of(x, head_dim);
    at::Tensor out = at::empty({x.size(0), x.size(1), x.size(2)}, x.options());
    at::Tensor rstd = at::empty({x.size(0), x.size(1)}, x.options().dtype(at::kFloat));
    kernels::rms_norm_rope_forward(x.data_ptr(), weight.data_ptr<float>(),
                                   pairs_or_null(rotation_pairs), out.data_ptr(),
                                   rstd.data_ptr<float>(), shape, static_cast<float>(eps),
                                   precision_of(x), at::cuda::getCurrentCUDAStream().stream());
    ctx->save_for_backward({x, weight, rotation_pairs, rstd});
    ctx->saved_data["head_dim"] = head_dim;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &rotation_pairs = saved[2],
                     &rstd = saved[3];
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor grad_out = grads[0].to(x.scalar_type()).contiguous();
    const kernels::RmsNormRopeShape shape = shape_of(x, ctx->saved_data["head_dim"].toInt());
    at::Tensor grad_x = at::empty({x.size(0), x.size(1), x.size(2)}, x.options());
    at::Tensor grad_weight = at::zeros_like(weight);
    kernels::rms_norm_rope_backward(grad_out.data_ptr(), x.data_ptr(), weight.data_ptr<float>(),
                                    pairs_or_null(rotation_pairs), rstd.data_ptr<float>(),
                                    grad_x.data_ptr(), grad_weight.data_ptr<float>(), shape,
                                    precision_of(x), at::cuda::getCurrentCUDAStream().stream());
    return {grad_x, grad_weight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_kernels_built() { return true; }

bool fused_rms_norm_rope_applies(const at::Tensor& x, int64_t head_dim) {
  if (!x.is_cuda() || x.dim() != 3 || x.size(0) == 0 || x.size(1) == 0) return false;
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) return false;
  if (x.stride(2) != 1 || x.stride(0) != x.size(1) * x.stride(1)) return false;
  return kernels::rms_norm_rope_supports(shape_of(x, head_dim));
}

at::Tensor fused_rms_norm_rope(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& rotation, int64_t head_dim, double eps) {
  if (!fused_rms_norm_rope_applies(x, head_dim) || weight.scalar_type() != at::kFloat) {
    throw Error("fused_rms_norm_rope: unsupported input (check fused_rms_norm_rope_applies)");
  }
  const at::Tensor pairs = rotation.defined() ? at::view_as_real(rotation).contiguous()
                                              : at::empty({0}, x.options().dtype(at::kFloat));
  return FusedRmsNormRope::apply(x, weight.contiguous(), pairs, head_dim, eps);
}

#else

bool fused_kernels_built() { return false; }

bool fused_rms_norm_rope_applies(const at::Tensor&, int64_t) { return false; }

at::Tensor fused_rms_norm_rope(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                               double) {
  throw Error("fused_rms_norm_rope: this build has no fused CUDA kernels (no CUDA compiler)");
}

#endif

}  // namespace wam::models
