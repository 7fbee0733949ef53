#include "models/constant_rows_linear.h"

#include "models/epilogue_linear.h"
#include "wam/error.h"

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Saves the weight in rows' dtype (the cast autocast would save for the product's backward) and
// `rows`, which the caller shares among layers, so nothing is stored per layer beyond the
// composition it replaces.
class ConstantRowsLinear : public torch::autograd::Function<ConstantRowsLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& rows,
                            const at::Tensor& weight, const at::Tensor& bias) {
    const at::Tensor cast_weight = weight.to(rows.scalar_type());
    ctx->save_for_backward({rows, cast_weight, weight, bias});
    ctx->saved_data["constant_rows"] = rows.size(1) - x.size(1);
    return at::linear(rows, cast_weight, bias.to(rows.scalar_type()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &cast_weight = saved[1], &weight = saved[2],
                     &bias = saved[3];
    const int64_t constant_rows = ctx->saved_data["constant_rows"].toInt();
    const at::Tensor grad = grads[0].reshape({-1, grads[0].size(-1)});
    const at::Tensor flat_rows = rows.reshape({-1, rows.size(-1)});
    const LinearGrads params =
        linear_param_grads(grad, flat_rows, weight.scalar_type(), bias.scalar_type());
    const int64_t x_rows = rows.size(1) - constant_rows;
    const at::Tensor grad_x = at::matmul(grads[0].narrow(1, constant_rows, x_rows), cast_weight);
    return {grad_x, at::Tensor(), params.weight, params.bias};
  }
};

}  // namespace

at::Tensor constant_rows_linear(const at::Tensor& x, const at::Tensor& rows,
                                const at::Tensor& weight, const at::Tensor& bias) {
  const bool fits = x.dim() == 3 && rows.dim() == 3 && weight.dim() == 2 && bias.dim() == 1 &&
                    x.size(0) == rows.size(0) && x.size(1) <= rows.size(1) &&
                    x.size(2) == rows.size(2) && weight.size(1) == rows.size(2) &&
                    bias.size(0) == weight.size(0);
  if (!fits) {
    throw Error(c10::str("constant_rows_linear: x ", x.sizes(), ", rows ", rows.sizes(),
                         ", weight ", weight.sizes(), " and bias ", bias.sizes(),
                         " do not fit ([B, L, in], [B, S + L, in], [out, in], [out])"));
  }
  return ConstantRowsLinear::apply(x, rows.detach(), weight, bias);
}

}  // namespace wam::models
