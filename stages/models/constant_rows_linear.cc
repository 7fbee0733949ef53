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
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& rows,
                            at::TensorList weights, at::TensorList biases) {
    const JointParams params = joint_params_in(weights, biases, rows.scalar_type());
    remember_layers(ctx, weights, biases);
    ctx->save_for_backward({rows, params.weight});
    ctx->saved_data["constant_rows"] = rows.size(1) - x.size(1);
    return at::linear(rows, params.weight, params.bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &cast_weight = saved[1];
    const int64_t constant_rows = ctx->saved_data["constant_rows"].toInt();
    const int64_t x_rows = rows.size(1) - constant_rows;
    variable_list out = {at::matmul(grads[0].narrow(1, constant_rows, x_rows), cast_weight),
                         at::Tensor()};
    for (at::Tensor& part : layer_param_grads(ctx, grads[0].reshape({-1, grads[0].size(-1)}),
                                              rows.reshape({-1, rows.size(-1)}))) {
      out.push_back(std::move(part));
    }
    return out;
  }
};

}  // namespace

at::Tensor constant_rows_linear(const at::Tensor& x, const at::Tensor& rows, at::TensorList weights,
                                at::TensorList biases) {
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
