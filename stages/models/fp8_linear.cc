#include "models/fp8_linear.h"

#include <stdexcept>
#include <string>

#include "models/epilogue_linear.h"

#if WAM_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/epilogue_gemm.h"
#include "kernels/fp8.h"
#endif

namespace wam::models {

bool fp8_linears_built() {
#if WAM_FUSED_KERNELS
  return true;
#else
  return false;
#endif
}

bool fp8_linear_applies(const at::Tensor& x, const at::Tensor& weight) {
  return fp8_linears_built() && epilogue_linears_apply(x) && weight.dim() == 2 &&
         weight.size(0) % 16 == 0 && weight.size(1) % 16 == 0 && x.size(-1) == weight.size(1) &&
         (x.numel() / x.size(-1)) % 16 == 0 &&
         (weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kBFloat16);
}

Fp8LinearState::Fp8LinearState(at::Tensor steps_done) : steps_done_(std::move(steps_done)) {}

Fp8LinearState& Fp8Linears::state_for(const at::Tensor& weight) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::unique_ptr<Fp8LinearState>& state = states_[weight.unsafeGetTensorImpl()];
  if (!state) state = std::make_unique<Fp8LinearState>(steps_done_);
  return *state;
}

#if WAM_FUSED_KERNELS
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Cast = Fp8LinearState::Cast;

kernels::Precision precision_of(const at::Tensor& x) {
  return x.scalar_type() == at::kFloat ? kernels::Precision::kFloat32
                                       : kernels::Precision::kBFloat16;
}

kernels::Fp8Format format_of(Fp8LinearState::Role role) {
  return role == Fp8LinearState::kOutputGradient ? kernels::Fp8Format::kE5M2
                                                 : kernels::Fp8Format::kE4M3;
}

// The casts read 16 bytes at a time; a view can start anywhere.
at::Tensor aligned(const at::Tensor& x) {
  return reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 ? x : x.clone();
}

kernels::Fp8Operand operand(const at::Tensor& data, const at::Tensor& scale_inverse,
                            kernels::Fp8Format format) {
  return {data.data_ptr(), format, scale_inverse.data_ptr<float>()};
}

at::Tensor workspace_for(const at::Tensor& like) {
  return at::empty({static_cast<int64_t>(kernels::kEpilogueGemmWorkspaceBytes)},
                   like.options().dtype(at::kByte));
}

// out [rows, n] = left [rows, k] right [n, k]^T (+ bias); see kernels::fp8_product. False when
// cuBLASLt has no algorithm for it.
bool try_product(const kernels::Fp8Operand& left, const kernels::Fp8Operand& right, int64_t rows,
                 int64_t k, int64_t n, const at::Tensor& bias, const at::Tensor& out,
                 const at::Tensor& pre_activation, bool fast_accumulation) {
  const at::Tensor workspace = workspace_for(out);
  return kernels::fp8_product(
      left, right, rows, k, n, bias.defined() ? bias.data_ptr() : nullptr, out.data_ptr(),
      precision_of(out), pre_activation.defined() ? pre_activation.data_ptr() : nullptr,
      fast_accumulation, workspace.data_ptr(), at::cuda::getCurrentCUDAStream());
}

// try_product, an error saying what to do when it cannot run.
void product(const kernels::Fp8Operand& left, const kernels::Fp8Operand& right, int64_t rows,
             int64_t k, int64_t n, const at::Tensor& bias, const at::Tensor& out,
             const at::Tensor& pre_activation, bool fast_accumulation) {
  if (!try_product(left, right, rows, k, n, bias, out, pre_activation, fast_accumulation)) {
    throw std::runtime_error("FP8 product: cuBLASLt has no algorithm for [" + std::to_string(rows) +
                             " x " + std::to_string(k) + "] x [" + std::to_string(n) + " x " +
                             std::to_string(k) +
                             "]^T on this device; set TrainStep's precision to \"bf16\"");
  }
}

Fp8LinearState* state_of(AutogradContext* ctx, const char* key) {
  return reinterpret_cast<Fp8LinearState*>(ctx->saved_data[key].toInt());
}

// A layer's parameter gradients from its output gradient's cast (with its column sums, the bias
// gradient) and its input's transposed cast: grad_weight [out, in] = grad^T x as one FP8 product
// over the rows, written in float32.
LinearGrads fp8_param_grads(const Cast& grad8, const at::Tensor& x_transposed,
                            const at::Tensor& x_scale, const at::Tensor& weight,
                            const at::Tensor& bias) {
  const int64_t out = grad8.transposed.size(0), rows = grad8.transposed.size(1),
                in = x_transposed.size(0);
  const kernels::Fp8Operand left =
      operand(grad8.transposed, grad8.scale_inverse, kernels::Fp8Format::kE5M2);
  const kernels::Fp8Operand right = operand(x_transposed, x_scale, kernels::Fp8Format::kE4M3);
  at::Tensor grad_weight = at::empty({out, in}, grad8.data.options().dtype(at::kFloat));
  // Float32 straight from the product where cuBLASLt has it, else bf16 and a cast.
  if (!try_product(left, right, out, rows, in, at::Tensor(), grad_weight, at::Tensor(),
                   /*fast_accumulation=*/false)) {
    grad_weight = at::empty({out, in}, grad8.data.options().dtype(at::kBFloat16));
    product(left, right, out, rows, in, at::Tensor(), grad_weight, at::Tensor(),
            /*fast_accumulation=*/false);
  }
  return {grad_weight.to(weight.scalar_type()), grad8.column_sums.to(bias.scalar_type())};
}

// Saves the input's and the weight's transposed FP8 copies (the weight gradient's and the input
// gradient's operands): a byte an element where the bf16 path saves two.
class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, Fp8LinearState* state) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor rows = linear_rows(x);
    const int64_t m = rows.size(0), k = rows.size(1), n = weight.size(0);
    const Cast x8 = state->cast(Fp8LinearState::kInput, rows);
    const Cast w8 = state->cast(Fp8LinearState::kWeight, weight.contiguous());
    const at::Tensor out = at::empty({m, n}, rows.options());
    product(operand(x8.data, x8.scale_inverse, kernels::Fp8Format::kE4M3),
            operand(w8.data, w8.scale_inverse, kernels::Fp8Format::kE4M3), m, k, n,
            bias.to(rows.scalar_type()), out, at::Tensor(), /*fast_accumulation=*/true);
    ctx->save_for_backward(
        {x8.transposed, x8.scale_inverse, w8.transposed, w8.scale_inverse, weight, bias});
    ctx->saved_data["state"] = reinterpret_cast<int64_t>(state);
    return out.view(with_last_size(x.sizes(), n));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x_t8 = saved[0], &x_scale = saved[1], &weight_t8 = saved[2],
                     &weight_scale = saved[3], &weight = saved[4], &bias = saved[5];
    const c10::cuda::CUDAGuard guard(x_t8.device());
    const at::Tensor grad = linear_rows(grads[0]);
    const int64_t m = grad.size(0), n = grad.size(1), k = x_t8.size(0);
    const Cast g8 = state_of(ctx, "state")
                        ->cast(Fp8LinearState::kOutputGradient, grad,
                               /*column_sums=*/true);
    at::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      grad_x = at::empty({m, k}, grad.options());
      product(operand(g8.data, g8.scale_inverse, kernels::Fp8Format::kE5M2),
              operand(weight_t8, weight_scale, kernels::Fp8Format::kE4M3), m, n, k, at::Tensor(),
              grad_x, at::Tensor(), /*fast_accumulation=*/false);
      grad_x = grad_x.view(with_last_size(grads[0].sizes(), k));
    }
    const LinearGrads params = fp8_param_grads(g8, x_t8, x_scale, weight, bias);
    return {grad_x, params.weight, params.bias, at::Tensor()};
  }
};

// Saves the pre-activation (for GELU's derivative), the input's and the activation's transposed
// FP8 copies and both weights': the bf16 path saves the input and the activation in bf16.
class Fp8GeluMlp : public torch::autograd::Function<Fp8GeluMlp> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& in_weight,
                            const at::Tensor& in_bias, const at::Tensor& out_weight,
                            const at::Tensor& out_bias, Fp8LinearState* in_state,
                            Fp8LinearState* out_state) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor rows = linear_rows(x);
    const at::ScalarType dtype = rows.scalar_type();
    const int64_t m = rows.size(0), d = rows.size(1), f = in_weight.size(0);
    const Cast x8 = in_state->cast(Fp8LinearState::kInput, rows);
    const Cast in8 = in_state->cast(Fp8LinearState::kWeight, in_weight.contiguous());
    const at::Tensor in_bias_cast = in_bias.to(dtype);
    const kernels::Fp8Operand x_operand =
        operand(x8.data, x8.scale_inverse, kernels::Fp8Format::kE4M3);
    const kernels::Fp8Operand in_operand =
        operand(in8.data, in8.scale_inverse, kernels::Fp8Format::kE4M3);
    const at::Tensor pre_activation = at::empty({m, f}, rows.options());
    at::Tensor activated = at::empty({m, f}, rows.options());
    if (!try_product(x_operand, in_operand, m, d, f, in_bias_cast, activated, pre_activation,
                     /*fast_accumulation=*/true)) {
      product(x_operand, in_operand, m, d, f, in_bias_cast, pre_activation, at::Tensor(),
              /*fast_accumulation=*/true);
      activated = at::gelu(pre_activation, "tanh");
    }
    const Cast a8 = out_state->cast(Fp8LinearState::kInput, activated);
    const Cast out8 = out_state->cast(Fp8LinearState::kWeight, out_weight.contiguous());
    const at::Tensor out = at::empty({m, out_weight.size(0)}, rows.options());
    product(operand(a8.data, a8.scale_inverse, kernels::Fp8Format::kE4M3),
            operand(out8.data, out8.scale_inverse, kernels::Fp8Format::kE4M3), m, f,
            out_weight.size(0), out_bias.to(dtype), out, at::Tensor(), /*fast_accumulation=*/true);
    ctx->save_for_backward({x8.transposed, x8.scale_inverse, pre_activation, a8.transposed,
                            a8.scale_inverse, in8.transposed, in8.scale_inverse, out8.transposed,
                            out8.scale_inverse, in_weight, in_bias, out_weight, out_bias});
    ctx->saved_data["in_state"] = reinterpret_cast<int64_t>(in_state);
    ctx->saved_data["out_state"] = reinterpret_cast<int64_t>(out_state);
    return out.view(with_last_size(x.sizes(), out_weight.size(0)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x_t8 = saved[0], &x_scale = saved[1], &pre_activation = saved[2],
                     &activated_t8 = saved[3], &activated_scale = saved[4], &in_t8 = saved[5],
                     &in_scale = saved[6], &out_t8 = saved[7], &out_scale = saved[8],
                     &in_weight = saved[9], &in_bias = saved[10], &out_weight = saved[11],
                     &out_bias = saved[12];
    const c10::cuda::CUDAGuard guard(x_t8.device());
    const at::Tensor grad = linear_rows(grads[0]);
    const int64_t m = grad.size(0), d = x_t8.size(0), f = pre_activation.size(1);
    const Cast g8 = state_of(ctx, "out_state")
                        ->cast(Fp8LinearState::kOutputGradient, grad, /*column_sums=*/true);
    const LinearGrads out_grads =
        fp8_param_grads(g8, activated_t8, activated_scale, out_weight, out_bias);
    const at::Tensor grad_activated = at::empty({m, f}, grad.options());
    product(operand(g8.data, g8.scale_inverse, kernels::Fp8Format::kE5M2),
            operand(out_t8, out_scale, kernels::Fp8Format::kE4M3), m, grad.size(1), f, at::Tensor(),
            grad_activated, at::Tensor(), /*fast_accumulation=*/false);
    // GELU's derivative as ATen's pass, as in the bf16 path (docs/KERNELS.md, version 6).
    const at::Tensor grad_pre = at::gelu_backward(grad_activated, pre_activation, "tanh");
    const Cast p8 = state_of(ctx, "in_state")
                        ->cast(Fp8LinearState::kOutputGradient, grad_pre, /*column_sums=*/true);
    const LinearGrads in_grads = fp8_param_grads(p8, x_t8, x_scale, in_weight, in_bias);
    at::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      grad_x = at::empty({m, d}, grad.options());
      product(operand(p8.data, p8.scale_inverse, kernels::Fp8Format::kE5M2),
              operand(in_t8, in_scale, kernels::Fp8Format::kE4M3), m, f, d, at::Tensor(), grad_x,
              at::Tensor(), /*fast_accumulation=*/false);
      grad_x = grad_x.view(with_last_size(grads[0].sizes(), d));
    }
    return {grad_x,         in_grads.weight, in_grads.bias, out_grads.weight,
            out_grads.bias, at::Tensor(),    at::Tensor()};
  }
};

}  // namespace

Fp8LinearState::Cast Fp8LinearState::cast(Role role, const at::Tensor& matrix, bool column_sums) {
  const at::Tensor source = aligned(matrix.contiguous());
  const int64_t rows = source.size(0), cols = source.size(1);
  const at::TensorOptions bytes = source.options().dtype(at::kByte),
                          floats = source.options().dtype(at::kFloat);
  Cast cast{at::empty({rows, cols}, bytes), at::empty({cols, rows}, bytes), at::empty({1}, floats),
            at::Tensor()};
  const at::Tensor partials =
      column_sums ? at::empty({kernels::fp8_column_partial_rows(rows), cols}, floats)
                  : at::Tensor();
  const kernels::Fp8Scaling scaling = scaling_for(role, source, cast.scale_inverse);
  if (!kernels::fp8_cast_transposed(
          source.data_ptr(), precision_of(source), rows, cols, format_of(role), scaling,
          cast.data.data_ptr(), cast.transposed.data_ptr(),
          column_sums ? partials.data_ptr<float>() : nullptr, at::cuda::getCurrentCUDAStream())) {
    throw std::logic_error("Fp8LinearState::cast: [" + std::to_string(rows) + ", " +
                           std::to_string(cols) +
                           "], not multiples of 4 (fp8_linear_applies lets none through)");
  }
  // The blocks' partial sums added in a fixed order: the same bits on every run.
  if (column_sums) cast.column_sums = partials.sum(0);
  return cast;
}

kernels::Fp8Scaling Fp8LinearState::scaling_for(Role role, const at::Tensor& source,
                                                const at::Tensor& scale_inverse) {
  if (!history_[role].defined()) {
    history_[role] = at::zeros({kernels::kFp8HistoryLength}, source.options().dtype(at::kLong));
  }
  const kernels::Fp8Scaling scaling{
      reinterpret_cast<unsigned long long*>(history_[role].data_ptr<int64_t>()),
      steps_done_.data_ptr<float>(), scale_inverse.data_ptr<float>()};
  if (!cast_before_[role]) {
    kernels::fp8_record_previous_amax(source.data_ptr(), precision_of(source), source.numel(),
                                      scaling, at::cuda::getCurrentCUDAStream());
    cast_before_[role] = true;
  }
  return scaling;
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      Fp8LinearState& state) {
  if (!fp8_linear_applies(x, weight)) return epilogue_linear(x, weight, bias);
  return Fp8Linear::apply(x, weight, bias, &state);
}

at::Tensor fp8_gelu_mlp(const at::Tensor& x, const at::Tensor& in_weight, const at::Tensor& in_bias,
                        const at::Tensor& out_weight, const at::Tensor& out_bias,
                        Fp8LinearState& in_state, Fp8LinearState& out_state) {
  if (!fp8_linear_applies(x, in_weight) || out_weight.size(0) % 16 != 0 ||
      out_weight.size(1) != in_weight.size(0)) {
    return epilogue_gelu_mlp(x, in_weight, in_bias, out_weight, out_bias);
  }
  return Fp8GeluMlp::apply(x, in_weight, in_bias, out_weight, out_bias, &in_state, &out_state);
}

#else  // no fused kernels: fp8_linear_applies is false, and the bf16 paths run

Fp8LinearState::Cast Fp8LinearState::cast(Role, const at::Tensor&, bool) {
  throw std::logic_error("FP8 casts need the fused CUDA kernels, which this build lacks");
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      Fp8LinearState&) {
  return epilogue_linear(x, weight, bias);
}

at::Tensor fp8_gelu_mlp(const at::Tensor& x, const at::Tensor& in_weight, const at::Tensor& in_bias,
                        const at::Tensor& out_weight, const at::Tensor& out_bias, Fp8LinearState&,
                        Fp8LinearState&) {
  return epilogue_gelu_mlp(x, in_weight, in_bias, out_weight, out_bias);
}

#endif

}  // namespace wam::models
