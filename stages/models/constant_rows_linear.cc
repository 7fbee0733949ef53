#include "models/constant_rows_linear.h"

#include <sstream>

#include "models/epilogue_linear.h"
#include "wam/error.h"

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Saves the weights in rows' dtype (the cast autocast would save for the product's backward; in
// bfloat16 a view of the kept copies, no memory of its own) and `rows`, which the caller shares
// among layers, so nothing is stored per layer beyond the composition it replaces.
class ConstantRowsLinear : public torch::autograd::Function<ConstantRowsLinear> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& rows,
                               at::TensorList weights, at::TensorList biases) {
    const JointParams params = joint_params_in(weights, biases, rows.scalar_type());
    remember_layers(ctx, weights, biases);
    ctx->save_for_backward({rows, params.weight});
    ctx->saved_data["constant_rows"] = rows.size(1) - x.size(1);
    return at::linear(rows, params.weight, params.bias)
        .split_with_sizes(remembered_layers(ctx).widths, -1);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &cast_weight = saved[1];
    const int64_t constant_rows = ctx->saved_data["constant_rows"].toInt();
    const int64_t x_rows = rows.size(1) - constant_rows;
    const LayerLayout layers = remembered_layers(ctx);
    const std::vector<int64_t>& widths = layers.widths;
    const at::Tensor flat_rows = rows.reshape({-1, rows.size(-1)});
    at::Tensor grad_x;
    variable_list weight_grads, bias_grads;
    int64_t first = 0;
    for (size_t i = 0; i < widths.size(); ++i) {
      const at::Tensor weight = cast_weight.narrow(0, first, widths[i]);
      first += widths[i];
      // An output nothing read: its layer's gradients are zeros.
      const at::Tensor grad =
          grads[i].defined() ? grads[i]
                             : at::zeros({rows.size(0), rows.size(1), widths[i]}, rows.options());
      const at::Tensor part = at::matmul(grad.narrow(1, constant_rows, x_rows), weight);
      grad_x = grad_x.defined() ? grad_x + part : part;
      const LinearGrads params =
          linear_param_grads(linear_rows(grad), flat_rows, layers.weight_dtype, layers.bias_dtype);
      weight_grads.push_back(params.weight);
      bias_grads.push_back(params.bias);
    }
    variable_list out = {grad_x, at::Tensor()};
    out.insert(out.end(), weight_grads.begin(), weight_grads.end());
    out.insert(out.end(), bias_grads.begin(), bias_grads.end());
    return out;
  }
};

}  // namespace

std::vector<at::Tensor> constant_rows_linear(const at::Tensor& x, const at::Tensor& rows,
                                             at::TensorList weights, at::TensorList biases) {
  bool fits = x.dim() == 3 && rows.dim() == 3 && x.size(0) == rows.size(0) &&
              x.size(1) <= rows.size(1) && x.size(2) == rows.size(2) && !weights.empty() &&
              weights.size() == biases.size();
  for (size_t i = 0; fits && i < weights.size(); ++i) {
    fits = weights[i].dim() == 2 && biases[i].dim() == 1 && weights[i].size(1) == rows.size(2) &&
           biases[i].size(0) == weights[i].size(0);
  }
  if (!fits) {
    std::ostringstream message;
    message << "constant_rows_linear: x " << x.sizes() << ", rows " << rows.sizes() << ", weights";
    for (const at::Tensor& weight : weights) message << " " << weight.sizes();
    message << " and biases";
    for (const at::Tensor& bias : biases) message << " " << bias.sizes();
    message << " do not fit ([B, L, in], [B, S + L, in], [out, in] each, [out] each)";
    throw Error(message.str());
  }
  return ConstantRowsLinear::apply(x, rows.detach(), weights, biases);
}

}  // namespace wam::models
