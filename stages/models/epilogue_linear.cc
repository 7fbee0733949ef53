#include "models/epilogue_linear.h"

#include <optional>

#include "models/bf16_weights.h"
#include "models/token_split.h"
#include "wam/error.h"

#if WAM_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/epilogue_gemm.h"
#include "kernels/gelu_backward.h"
#endif

namespace wam::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

#if WAM_FUSED_KERNELS
kernels::Precision precision_of(at::ScalarType dtype) {
  return dtype == at::kFloat ? kernels::Precision::kFloat32 : kernels::Precision::kBFloat16;
}

at::Tensor workspace_for(const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(kernels::kEpilogueGemmWorkspaceBytes)},
                   like.options().dtype(at::kByte));
}

// The precisions to ask cuBLASLt for, best first: the wanted one (float32: the parameters' own,
// no cast pass; the H200's cuBLASLt 13 has it), then bfloat16, cast after, for a cuBLASLt without.
std::vector<at::ScalarType> precisions_for(at::ScalarType wanted) {
  if (wanted == at::kBFloat16) return {at::kBFloat16};
  return {at::kFloat, at::kBFloat16};
}

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// A linear layer's parameter gradients from one cuBLASLt product, the bias's in its epilogue where
// `with_bias` (else undefined); nullopt where the product does not apply.
std::optional<LinearGrads> product_param_grads(const at::Tensor& grad, const at::Tensor& x,
                                               at::ScalarType weight_dtype,
                                               at::ScalarType bias_dtype, bool with_bias) {
  if (!epilogue_linears_apply(grad) || x.scalar_type() != at::kBFloat16 ||
      (with_bias && bias_dtype != weight_dtype) ||
      (weight_dtype != at::kFloat && weight_dtype != at::kBFloat16)) {
    return std::nullopt;
  }
  const c10::cuda::CUDAGuard guard(grad.device());
  const at::Tensor flat_grad = grad.contiguous(), flat_x = x.contiguous();
  const kernels::LinearShape shape{grad.size(0), x.size(1), grad.size(1)};
  const at::Tensor workspace = workspace_for(grad);
  for (const at::ScalarType dtype : precisions_for(weight_dtype)) {
    at::Tensor weight = at::empty({shape.out, shape.in}, grad.options().dtype(dtype));
    at::Tensor bias =
        with_bias ? at::empty({shape.out}, grad.options().dtype(dtype)) : at::Tensor();
    if (kernels::linear_weight_grad_with_bias_grad(
            flat_grad.data_ptr(), flat_x.data_ptr(), shape, weight.data_ptr(),
            with_bias ? bias.data_ptr() : nullptr, precision_of(dtype), workspace.data_ptr(),
            at::cuda::getCurrentCUDAStream())) {
      return LinearGrads{weight.to(weight_dtype), with_bias ? bias.to(bias_dtype) : at::Tensor()};
    }
  }
  return std::nullopt;
}

// GELU's derivative with the column sums of its output (the first product's bias gradient) in one
// pass (kernels/gelu_backward.h), instead of gelu_backward and then the weight-gradient product's
// BGRADB kernel reading it all again; nullopt where the kernel does not apply.
struct GeluGrads {
  at::Tensor grad_pre, bias;
};
std::optional<GeluGrads> gelu_backward_with_bias_grad(const at::Tensor& grad_activated,
                                                      const at::Tensor& pre_activation,
                                                      at::ScalarType bias_dtype) {
  const bool applies =
      epilogue_linears_apply(grad_activated) && pre_activation.scalar_type() == at::kBFloat16 &&
      pre_activation.dim() == 2 && grad_activated.sizes() == pre_activation.sizes() &&
      grad_activated.is_contiguous() && pre_activation.is_contiguous() &&
      aligned16(grad_activated) && aligned16(pre_activation) &&
      kernels::gelu_backward_supports(pre_activation.size(0), pre_activation.size(1));
  if (!applies) return std::nullopt;
  const c10::cuda::CUDAGuard guard(pre_activation.device());
  const int64_t rows = pre_activation.size(0), width = pre_activation.size(1);
  at::Tensor grad_pre = at::empty_like(pre_activation);
  at::Tensor partials = at::empty({kernels::gelu_backward_blocks(rows), width},
                                  pre_activation.options().dtype(at::kFloat));
  kernels::gelu_backward_with_column_sums(
      grad_activated.data_ptr(), pre_activation.data_ptr(), rows, width, grad_pre.data_ptr(),
      partials.data_ptr<float>(), at::cuda::getCurrentCUDAStream().stream());
  return GeluGrads{grad_pre, partials.sum(0).to(bias_dtype)};
}
#endif

}  // namespace

at::Tensor linear_rows(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}).contiguous(); }

std::vector<int64_t> with_last_size(at::IntArrayRef sizes, int64_t last) {
  std::vector<int64_t> out(sizes.begin(), sizes.end());
  out.back() = last;
  return out;
}

bool epilogue_linears_apply(const at::Tensor& x) {
#if WAM_FUSED_KERNELS
  return x.is_cuda() && x.scalar_type() == at::kBFloat16;
#else
  return false;
#endif
}

LinearGrads linear_param_grads(const at::Tensor& grad, const at::Tensor& x,
                               at::ScalarType weight_dtype, at::ScalarType bias_dtype) {
#if WAM_FUSED_KERNELS
  if (auto grads = product_param_grads(grad, x, weight_dtype, bias_dtype, /*with_bias=*/true)) {
    return *grads;
  }
#endif
  return {grad.t().mm(x).to(weight_dtype), at::sum(grad, {0}, /*keepdim=*/false, bias_dtype)};
}

namespace {

// The weight gradient alone, [out, in] in weight_dtype, from grad [rows, out] and x [rows, in].
at::Tensor linear_weight_grad(const at::Tensor& grad, const at::Tensor& x,
                              at::ScalarType weight_dtype) {
#if WAM_FUSED_KERNELS
  if (auto grads = product_param_grads(grad, x, weight_dtype, weight_dtype, /*with_bias=*/false)) {
    return grads->weight;
  }
#endif
  return grad.t().mm(x).to(weight_dtype);
}

// The gradients of x, weight and bias of a linear layer whose op saved {x, the cast weight,
// weight, bias}, from its output's gradient in x's dtype; no bias gradient where the op left the
// bias out (`with_bias` false).
variable_list saved_linear_grads(AutogradContext* ctx, const at::Tensor& grad,
                                 bool with_bias = true) {
  const variable_list saved = ctx->get_saved_variables();
  const at::Tensor &x = saved[0], &cast_weight = saved[1], &weight = saved[2], &bias = saved[3];
  at::Tensor grad_x;
  if (ctx->needs_input_grad(0)) grad_x = at::matmul(grad, cast_weight);
  if (!with_bias) {
    return {grad_x, linear_weight_grad(linear_rows(grad), linear_rows(x), weight.scalar_type()),
            at::Tensor()};
  }
  const LinearGrads params = linear_param_grads(linear_rows(grad), linear_rows(x),
                                                weight.scalar_type(), bias.scalar_type());
  return {grad_x, params.weight, params.bias};
}

// Saves x and the cast weight, as ATen's linear under autocast does, and the parameters (no
// memory) for their dtypes. `with_bias` false: the product without the bias, which another op
// adds (fused_add_biased_gated), and no gradient for it here.
class EpilogueLinear : public torch::autograd::Function<EpilogueLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, bool with_bias) {
    const at::Tensor cast_weight = weight_in(weight, x.scalar_type());
    ctx->save_for_backward({x, cast_weight, weight, bias});
    ctx->saved_data["with_bias"] = with_bias;
    if (!with_bias) return at::linear(x, cast_weight);
    return at::linear(x, cast_weight, weight_in(bias, x.scalar_type()));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list out = saved_linear_grads(ctx, grads[0], ctx->saved_data["with_bias"].toBool());
    out.push_back(at::Tensor());  // with_bias
    return out;
  }
};

// residual + linear(x, weight, bias), and the output's gradient channel (LinearResidual): saves
// what EpilogueLinear saves, not the residual (its gradient is the output's). Grads are not
// materialised, so that a channel no op gave a gradient comes back undefined, not as zeros.
class EpilogueLinearResidual : public torch::autograd::Function<EpilogueLinearResidual> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, const at::Tensor& residual) {
    ctx->set_materialize_grads(false);
    const at::Tensor cast_weight = weight_in(weight, x.scalar_type());
    const at::Tensor out = residual_plus_linear(x, cast_weight, bias, residual);
    ctx->save_for_backward({x, cast_weight, weight, bias});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    // One element behind out's shape (every stride 0): no memory, a place for a gradient.
    return {out, at::empty_strided(out.sizes(), std::vector<int64_t>(out.dim(), 0), x.options())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    variable_list out =
        saved_linear_grads(ctx, grads[1].defined() ? grads[1] : grads[0].to(x_dtype));
    out.push_back(grads[0]);  // the residual's
    return out;
  }

 private:
  static at::Tensor residual_plus_linear(const at::Tensor& x, const at::Tensor& cast_weight,
                                         const at::Tensor& bias, const at::Tensor& residual) {
#if WAM_FUSED_KERNELS
    const at::Tensor rows = linear_rows(x);
    const bool applies =
        epilogue_linears_apply(x) && residual.is_cuda() && residual.is_contiguous() &&
        residual.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat &&
        residual.sizes() == at::IntArrayRef(with_last_size(x.sizes(), cast_weight.size(0))) &&
        aligned16(residual) && aligned16(rows) && aligned16(cast_weight);
    if (applies) {
      const c10::cuda::CUDAGuard guard(x.device());
      const kernels::LinearShape shape{rows.size(0), rows.size(1), cast_weight.size(0)};
      at::Tensor out = at::empty_like(residual);
      const at::Tensor workspace = workspace_for(rows), flat_bias = bias.contiguous();
      if (kernels::linear_forward_with_residual(
              rows.data_ptr(), cast_weight.data_ptr(), flat_bias.data_ptr<float>(),
              residual.data_ptr<float>(), shape, out.data_ptr<float>(), workspace.data_ptr(),
              at::cuda::getCurrentCUDAStream())) {
        return out;
      }
    }
#endif
    return residual + at::linear(x, cast_weight, weight_in(bias, x.scalar_type()));
  }
};

// x's product written into rows [first, first + N_x) of `joint` [B, N, out] (bfloat16,
// contiguous) and returned as a tensor of its own over them, or undefined where it cannot be.
#if WAM_FUSED_KERNELS
at::Tensor product_into_rows(const at::Tensor& x, const JointParams& params,
                             const c10::optional<at::Tensor>& into, int64_t first) {
  if (!into.has_value() || !into->defined()) return at::Tensor();
  const at::Tensor& joint = *into;
  const int64_t out_width = params.weight.size(0);
  const bool applies =
      epilogue_linears_apply(x) && x.dim() == 3 && joint.dim() == 3 &&
      joint.scalar_type() == at::kBFloat16 && joint.is_contiguous() &&
      joint.device() == x.device() && joint.size(0) == x.size(0) && joint.size(2) == out_width &&
      first >= 0 && first + x.size(1) <= joint.size(1) && params.bias.defined() &&
      params.weight.scalar_type() == at::kBFloat16 && params.bias.scalar_type() == at::kBFloat16;
  if (applies) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor rows = linear_rows(x), weight = params.weight.contiguous(),
                     bias = params.bias.contiguous();
    const int64_t tokens = joint.size(1);
    at::Tensor out =
        at::empty({0}, joint.options())
            .set_(joint.storage(), joint.storage_offset() + first * out_width,
                  {x.size(0), x.size(1), out_width}, {tokens * out_width, out_width, 1});
    const int64_t per_sample = x.size(1);
    const kernels::RowGroups x_rows{x.size(0), per_sample * rows.size(1), rows.size(1)},
        out_rows{x.size(0), tokens * out_width, out_width};
    const at::Tensor workspace = workspace_for(rows);
    if (aligned16(rows) && aligned16(weight) && aligned16(bias) && aligned16(out) &&
        kernels::linear_row_groups(
            rows.data_ptr(), x_rows, weight.data_ptr(), kernels::WeightLayout::kOutIn,
            bias.data_ptr(), {rows.size(0), rows.size(1), out_width}, out.data_ptr(), out_rows,
            workspace.data_ptr(), at::cuda::getCurrentCUDAStream())) {
      return out;
    }
  }
  return at::Tensor();
}
#else
at::Tensor product_into_rows(const at::Tensor&, const JointParams&,
                             const c10::optional<at::Tensor>&, int64_t) {
  return at::Tensor();
}
#endif

// Saves x and the joint cast weight (a view of the kept copies: no memory of its own there).
// `into`: a joint buffer for the output's rows from `first` (product_into_rows), or undefined.
class EpilogueJointLinear : public torch::autograd::Function<EpilogueJointLinear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                            at::TensorList biases, const c10::optional<at::Tensor>& into,
                            int64_t first) {
    const JointParams params = joint_params_in(weights, biases, x.scalar_type());
    remember_layers(ctx, weights, biases);
    ctx->save_for_backward({x, params.weight});
    const at::Tensor in_rows = product_into_rows(x, params, into, first);
    return in_rows.defined() ? in_rows : at::linear(x, params.weight, params.bias);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &cast_weight = saved[1];
    const LayerLayout layers = remembered_layers(ctx);
    variable_list out = {ctx->needs_input_grad(0) ? at::matmul(grads[0], cast_weight)
                                                  : at::Tensor()};
    // One product for every layer's parameter gradients, each layer its rows of them.
    const LinearGrads params = linear_param_grads(linear_rows(grads[0]), linear_rows(x),
                                                  layers.weight_dtype, layers.bias_dtype);
    for (const at::Tensor& part : params.weight.split_with_sizes(layers.widths)) {
      out.push_back(part);
    }
    for (const at::Tensor& part : params.bias.split_with_sizes(layers.widths)) out.push_back(part);
    out.resize(out.size() + 2);  // none for `into` and `first`
    return out;
  }
};

#if WAM_FUSED_KERNELS
// out [B, n, out] = x [B, n, in] times `weight` (stored as `layout` says) by one strided batched
// product, x's and out's rows contiguous and their samples any distance apart (tokens of a
// buffer of several experts'); false, having written nothing, where it does not apply.
bool rows_product(const at::Tensor& x, const at::Tensor& weight, kernels::WeightLayout layout,
                  const at::Tensor& out) {
  const bool out_in = layout == kernels::WeightLayout::kOutIn;
  const int64_t in = weight.size(out_in ? 1 : 0), out_width = weight.size(out_in ? 0 : 1);
  const bool applies = epilogue_linears_apply(x) && out.scalar_type() == at::kBFloat16 &&
                       weight.scalar_type() == at::kBFloat16 && weight.is_contiguous() &&
                       x.dim() == 3 && out.dim() == 3 && x.size(2) == in &&
                       out.size(2) == out_width && x.size(0) == out.size(0) &&
                       x.size(1) == out.size(1) && x.stride(2) == 1 && out.stride(2) == 1 &&
                       aligned16(x) && aligned16(out) && aligned16(weight);
  if (!applies) return false;
  const c10::cuda::CUDAGuard guard(x.device());
  const at::Tensor workspace = workspace_for(x);
  return kernels::linear_row_groups(x.data_ptr(), {x.size(0), x.stride(0), x.stride(1)},
                                    weight.data_ptr(), layout, nullptr,
                                    {x.size(0) * x.size(1), in, out_width}, out.data_ptr(),
                                    {out.size(0), out.stride(0), out.stride(1)},
                                    workspace.data_ptr(), at::cuda::getCurrentCUDAStream());
}
#endif

// Each part e of x [B, N, W] along its tokens (`tokens`, summing to N) times its layer's weight
// [out_e, W], no bias. Saves x and the cast weights: the parts are read in place forward, and
// backward writes each part's input gradient into its rows of one [B, N, W] gradient, by strided
// batched products where they apply; each weight's gradient is one product over a copy of its
// part's rows, which samples N rows apart cannot be one reduction dimension of (docs/KERNELS.md,
// version 46).
class TokenPartsLinear : public torch::autograd::Function<TokenPartsLinear> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::TensorList weights,
                               const std::vector<int64_t>& tokens) {
    variable_list saved = {x}, outs;
    int64_t first = 0;
    for (size_t e = 0; e < tokens.size(); ++e) {
      const at::Tensor cast_weight = weight_in(weights[e], x.scalar_type()).contiguous(),
                       part = x.narrow(1, first, tokens[e]);
      at::Tensor out;
#if WAM_FUSED_KERNELS
      out = at::empty({x.size(0), tokens[e], cast_weight.size(0)}, x.options());
      if (!rows_product(part, cast_weight, kernels::WeightLayout::kOutIn, out)) out = at::Tensor();
#endif
      outs.push_back(out.defined() ? out : at::linear(part, cast_weight));
      saved.push_back(cast_weight);
      first += tokens[e];
    }
    ctx->save_for_backward(saved);
    ctx->saved_data["tokens"] = tokens;
    std::vector<int64_t> weight_dtypes;
    for (const at::Tensor& weight : weights) {
      weight_dtypes.push_back(static_cast<int64_t>(weight.scalar_type()));
    }
    ctx->saved_data["weight_dtypes"] = weight_dtypes;
    return outs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const std::vector<int64_t> tokens = ctx->saved_data["tokens"].toIntVector(),
                               weight_dtypes = ctx->saved_data["weight_dtypes"].toIntVector();
    const bool x_needs_grad = ctx->needs_input_grad(0);
    at::Tensor grad_x = x_needs_grad ? at::empty(x.sizes(), x.options()) : at::Tensor();
    variable_list out = {grad_x};
    int64_t first = 0;
    for (size_t e = 0; e < tokens.size(); ++e) {
      const at::Tensor grad = grads[e].to(x.scalar_type()).contiguous(),
                       &cast_weight = saved[1 + e];
      if (x_needs_grad) {
        const at::Tensor grad_part = grad_x.narrow(1, first, tokens[e]);
        bool written = false;
#if WAM_FUSED_KERNELS
        written = rows_product(grad, cast_weight, kernels::WeightLayout::kInOut, grad_part);
#endif
        if (!written) grad_part.copy_(at::matmul(grad, cast_weight));
      }
      at::Tensor part_rows = at::empty({x.size(0), tokens[e], x.size(2)}, x.options());
      copy_token_rows(part_rows, x.narrow(1, first, tokens[e]));
      out.push_back(linear_weight_grad(linear_rows(grad), linear_rows(part_rows),
                                       static_cast<at::ScalarType>(weight_dtypes[e])));
      first += tokens[e];
    }
    out.push_back(at::Tensor());  // tokens
    return out;
  }
};

// Saves x's rows, both cast weights, the pre-activation and the activation: what ATen's two
// linears and GELU save under autocast.
class EpilogueGeluMlp : public torch::autograd::Function<EpilogueGeluMlp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& in_weight,
                            const at::Tensor& in_bias, const at::Tensor& out_weight,
                            const at::Tensor& out_bias, bool with_out_bias) {
    const at::ScalarType dtype = x.scalar_type();
    const at::Tensor rows = linear_rows(x), cast_in_weight = weight_in(in_weight, dtype),
                     cast_in_bias = weight_in(in_bias, dtype),
                     cast_out_weight = weight_in(out_weight, dtype);
    at::Tensor pre_activation, activated;
#if WAM_FUSED_KERNELS
    if (epilogue_linears_apply(x)) {
      const c10::cuda::CUDAGuard guard(x.device());
      const kernels::LinearShape shape{rows.size(0), rows.size(1), in_weight.size(0)};
      at::Tensor pre = at::empty({shape.rows, shape.out}, rows.options());
      at::Tensor out = at::empty_like(pre);
      const at::Tensor workspace = workspace_for(rows);
      if (kernels::linear_gelu_forward(rows.data_ptr(), cast_in_weight.data_ptr(),
                                       cast_in_bias.data_ptr(), shape, out.data_ptr(),
                                       pre.data_ptr(), workspace.data_ptr(),
                                       at::cuda::getCurrentCUDAStream())) {
        pre_activation = pre;
        activated = out;
      }
    }
#endif
    if (!pre_activation.defined()) {
      pre_activation = at::linear(rows, cast_in_weight, cast_in_bias);
      activated = at::gelu(pre_activation, "tanh");
    }
    ctx->save_for_backward({rows, cast_in_weight, cast_out_weight, pre_activation, activated,
                            in_weight, in_bias, out_weight, out_bias});
    ctx->saved_data["with_out_bias"] = with_out_bias;
    const at::Tensor out = with_out_bias
                               ? at::linear(activated, cast_out_weight, weight_in(out_bias, dtype))
                               : at::linear(activated, cast_out_weight);
    return out.view(with_last_size(x.sizes(), out_weight.size(0)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &cast_in_weight = saved[1], &cast_out_weight = saved[2],
                     &pre_activation = saved[3], &activated = saved[4], &in_weight = saved[5],
                     &in_bias = saved[6], &out_weight = saved[7], &out_bias = saved[8];
    const at::Tensor grad = linear_rows(grads[0]);
    const LinearGrads out_grads =
        ctx->saved_data["with_out_bias"].toBool()
            ? linear_param_grads(grad, activated, out_weight.scalar_type(), out_bias.scalar_type())
            : LinearGrads{linear_weight_grad(grad, activated, out_weight.scalar_type()),
                          at::Tensor()};
    // GELU's derivative with the first layer's bias gradient in one pass where the kernel applies
    // (docs/KERNELS.md, version 16; cuBLASLt's DGELU_BGRAD epilogue ran as a separate, slower
    // kernel on the H200, version 6), else ATen's pass and the bias gradient with the weight's.
    const at::Tensor grad_activated = grad.mm(cast_out_weight);
    at::Tensor grad_pre;
    LinearGrads in_grads;
#if WAM_FUSED_KERNELS
    if (auto gelu =
            gelu_backward_with_bias_grad(grad_activated, pre_activation, in_bias.scalar_type())) {
      grad_pre = gelu->grad_pre;
      in_grads = {linear_weight_grad(grad_pre, rows, in_weight.scalar_type()), gelu->bias};
    }
#endif
    if (!grad_pre.defined()) {
      grad_pre = at::gelu_backward(grad_activated, pre_activation, "tanh");
      in_grads = linear_param_grads(grad_pre, rows, in_weight.scalar_type(), in_bias.scalar_type());
    }
    at::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      grad_x = grad_pre.mm(cast_in_weight).view(with_last_size(grads[0].sizes(), rows.size(1)));
    }
    return {grad_x, in_grads.weight, in_grads.bias, out_grads.weight, out_grads.bias, at::Tensor()};
  }
};

}  // namespace

JointParams joint_params_in(at::TensorList weights, at::TensorList biases, at::ScalarType dtype) {
  if (dtype == at::kBFloat16) {
    return {concatenated_bf16_weights(weights), concatenated_bf16_weights(biases)};
  }
  return {at::cat(weights).to(dtype), at::cat(biases).to(dtype)};
}

void remember_layers(AutogradContext* ctx, at::TensorList weights, at::TensorList biases) {
  std::vector<int64_t> widths;
  for (const at::Tensor& weight : weights) widths.push_back(weight.size(0));
  ctx->saved_data["widths"] = widths;
  ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weights.front().scalar_type());
  ctx->saved_data["bias_dtype"] = static_cast<int64_t>(biases.front().scalar_type());
}

LayerLayout remembered_layers(AutogradContext* ctx) {
  return {ctx->saved_data["widths"].toIntVector(),
          static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt()),
          static_cast<at::ScalarType>(ctx->saved_data["bias_dtype"].toInt())};
}

at::Tensor epilogue_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return EpilogueLinear::apply(x, weight, bias, /*with_bias=*/true);
}

at::Tensor epilogue_linear_without_bias(const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& bias) {
  return EpilogueLinear::apply(x, weight, bias, /*with_bias=*/false);
}

LinearResidual epilogue_linear_residual(const at::Tensor& x, const at::Tensor& weight,
                                        const at::Tensor& bias, const at::Tensor& residual) {
  const variable_list outs = EpilogueLinearResidual::apply(x, weight, bias, residual);
  if (x.scalar_type() == outs[0].scalar_type()) return {outs[0], at::Tensor()};  // no cast to skip
  return {outs[0], outs[1]};
}

at::Tensor epilogue_joint_linear(const at::Tensor& x, at::TensorList weights,
                                 at::TensorList biases) {
  return EpilogueJointLinear::apply(x, weights, biases, c10::optional<at::Tensor>(), int64_t{0});
}

at::Tensor epilogue_joint_linear_into(const at::Tensor& x, at::TensorList weights,
                                      at::TensorList biases, const TokenRows& rows) {
  return EpilogueJointLinear::apply(x, weights, biases, c10::optional<at::Tensor>(rows.joint),
                                    rows.first);
}

std::vector<at::Tensor> token_parts_linear_without_bias(const at::Tensor& x,
                                                        const std::vector<int64_t>& tokens,
                                                        at::TensorList weights) {
  const char* what = "token_parts_linear_without_bias";
  if (x.dim() != 3) {
    throw Error(std::string(what) + ": x must be [B, N, W], got " + std::to_string(x.dim()) +
                " dimensions");
  }
  if (weights.size() != tokens.size()) {
    throw Error(std::string(what) + ": " + std::to_string(tokens.size()) + " token counts but " +
                std::to_string(weights.size()) + " weights; give one weight a part");
  }
  int64_t sum = 0;
  for (const int64_t count : tokens) sum += count;
  if (sum != x.size(1)) {
    throw Error(std::string(what) + ": the token counts sum to " + std::to_string(sum) +
                ", not x's " + std::to_string(x.size(1)) + " tokens");
  }
  return TokenPartsLinear::apply(x, weights, tokens);
}

at::Tensor epilogue_gelu_mlp(const at::Tensor& x, const at::Tensor& in_weight,
                             const at::Tensor& in_bias, const at::Tensor& out_weight,
                             const at::Tensor& out_bias) {
  return EpilogueGeluMlp::apply(x, in_weight, in_bias, out_weight, out_bias,
                                /*with_out_bias=*/true);
}

at::Tensor epilogue_gelu_mlp_without_out_bias(const at::Tensor& x, const at::Tensor& in_weight,
                                              const at::Tensor& in_bias,
                                              const at::Tensor& out_weight,
                                              const at::Tensor& out_bias) {
  return EpilogueGeluMlp::apply(x, in_weight, in_bias, out_weight, out_bias,
                                /*with_out_bias=*/false);
}

}  // namespace wam::models
