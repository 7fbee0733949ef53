#include "models/modulation.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows [B, S, D] -> [B, groups, 1, D].
at::Tensor rows_per_group(const at::Tensor& rows, const TokenGroups& layout) {
  const at::Tensor grouped =
      layout.segment_of_group.defined() ? rows.index_select(1, layout.segment_of_group) : rows;
  return grouped.unsqueeze(2);
}

at::Tensor grouped_view(const at::Tensor& x, const TokenGroups& layout) {
  return x.reshape({x.size(0), layout.groups, -1, x.size(2)});
}

// shift + x * scale1 over grouped x [B, G, R, D] and rows [B, G, 1, D], stored in `dtype`. The
// gradients are those of addcmul followed by a cast, computed from the narrow incoming gradient
// without widening it first.
class ModulateAsFunction : public torch::autograd::Function<ModulateAsFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& shift,
                            const at::Tensor& scale1, at::ScalarType dtype) {
    ctx->save_for_backward({x, scale1});
    ctx->saved_data["shift_dtype"] = static_cast<int64_t>(shift.scalar_type());
    if (!x.is_cuda()) return at::addcmul(shift, x, scale1).to(dtype);  // CPU kernels cannot cast
    at::Tensor out = at::empty(x.sizes(), x.options().dtype(dtype));
    at::addcmul_out(out, shift, x, scale1);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &scale1 = saved[1], &grad = grads[0];
    const auto shift_dtype = static_cast<at::ScalarType>(ctx->saved_data["shift_dtype"].toInt());
    return {grad * scale1, at::sum(grad, {2}, /*keepdim=*/true, shift_dtype),
            (grad * x).sum({2}, /*keepdim=*/true), at::Tensor()};
  }
};

}  // namespace

at::Tensor modulate(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                    const TokenGroups& layout) {
  return at::addcmul(rows_per_group(shift, layout), grouped_view(x, layout),
                     rows_per_group(1 + scale, layout))
      .view(x.sizes());
}

at::Tensor modulate_as(const at::Tensor& x, const at::Tensor& shift, const at::Tensor& scale,
                       const TokenGroups& layout, at::ScalarType dtype) {
  return ModulateAsFunction::apply(grouped_view(x, layout), rows_per_group(shift, layout),
                                   rows_per_group(1 + scale, layout), dtype)
      .view(x.sizes());
}

at::Tensor gated(const at::Tensor& x, const at::Tensor& gate, const TokenGroups& layout) {
  return (grouped_view(x, layout) * rows_per_group(gate, layout)).view(x.sizes());
}

at::Tensor add_gated(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& gate,
                     const TokenGroups& layout) {
  // Autocast would widen x to the residual's dtype with a copy first; addcmul promotes as it loads.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  return at::addcmul(grouped_view(residual, layout), grouped_view(x, layout),
                     rows_per_group(gate, layout))
      .view(residual.sizes());
}

}  // namespace wam::models
