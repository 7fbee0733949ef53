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

// out [rows, n] = left [rows, k] right [n, k]^T (+ bias); see kernels::fp8_product.
void product(const kernels::Fp8Operand& left, const kernels::Fp8Operand& right, int64_t rows,
             int64_t k, int64_t n, const at::Tensor& bias, const at::Tensor& out,
             const at::Tensor& pre_activation, bool fast_accumulation) {
  const at::Tensor workspace = workspace_for(out);
  if (!kernels::fp8_product(
          left, right, rows, k, n, bias.defined() ? bias.data_ptr() : nullptr, out.data_ptr(),
          pre_activation.defined() ? pre_activation.data_ptr() : nullptr, fast_accumulation,
          workspace.data_ptr(), at::cuda::getCurrentCUDAStream())) {
    throw std::runtime_error("FP8 product: cuBLASLt has no algorithm for [" + std::to_string(rows) +
                             " x " + std::to_string(k) + "] x [" + std::to_string(n) + " x " +
                             std::to_string(k) +
                             "]^T on this device; set TrainStep's precision to \"bf16\"");
  }
}

bool try_gelu_product(const kernels::Fp8Operand& left, const kernels::Fp8Operand& right,
                      int64_t rows, int64_t k, int64_t n, const at::Tensor& bias,
                      const at::Tensor& activated, const at::Tensor& pre_activation) {
  const at::Tensor workspace = workspace_for(activated);
  return kernels::fp8_product(left, right, rows, k, n, bias.data_ptr(), activated.data_ptr(),
                              pre_activation.data_ptr(), /*fast_accumulation=*/true,
                              workspace.data_ptr(), at::cuda::getCurrentCUDAStream());
}

Fp8LinearState* state_of(AutogradContext* ctx, const char* key) {
  return reinterpret_cast<Fp8LinearState*>(ctx->saved_data[key].toInt());
}

// Saves x's rows (for the bf16 weight-gradient product) and the weight's transposed FP8 copy
// (for the input gradient's product): half the bytes of the bf16 weight the bf16 path saves.
class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, Fp8LinearState* state) {
    const c10::cuda::CUDAGuard guard(x.device());
    const at::Tensor rows = linear_rows(x);
    const int64_t m = rows.size(0), k = rows.size(1), n = weight.size(0);
    const Cast x8 = state->cast(Fp8LinearState::kInput, rows);
    const Cast w8 = state->cast_transposed(Fp8LinearState::kWeight, weight.contiguous());
    const at::Tensor out = at::empty({m, n}, rows.options());
    product(operand(x8.data, x8.scale_inverse, kernels::Fp8Format::kE4M3),
            operand(w8.data, w8.scale_inverse, kernels::Fp8Format::kE4M3), m, k, n,
            bias.to(rows.scalar_type()), out, at::Tensor(), /*fast_accumulation=*/true);
    ctx->save_for_backward({rows, w8.transposed, w8.scale_inverse, weight, bias});
    ctx->saved_data["state"] = reinterpret_cast<int64_t>(state);
    return out.view(with_last_size(x.sizes(), n));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &weight_t8 = saved[1], &weight_scale = saved[2],
                     &weight = saved[3], &bias = saved[4];
    const c10::cuda::CUDAGuard guard(rows.device());
    const at::Tensor grad = linear_rows(grads[0]);
    at::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      const Cast g8 = state_of(ctx, "state")->cast(Fp8LinearState::kOutputGradient, grad);
      grad_x = at::empty({grad.size(0), rows.size(1)}, grad.options());
      product(operand(g8.data, g8.scale_inverse, kernels::Fp8Format::kE5M2),
              operand(weight_t8, weight_scale, kernels::Fp8Format::kE4M3), grad.size(0),
              grad.size(1), rows.size(1), at::Tensor(), grad_x, at::Tensor(),
              /*fast_accumulation=*/false);
      grad_x = grad_x.view(with_last_size(grads[0].sizes(), rows.size(1)));
    }
    const LinearGrads params =
        linear_param_grads(grad, rows, weight.scalar_type(), bias.scalar_type());
    return {grad_x, params.weight, params.bias, at::Tensor()};
  }
};

// Saves x's rows, the pre-activation and the activation (as the bf16 path does) and both weights'
// transposed FP8 copies.
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
    const Cast in8 = in_state->cast_transposed(Fp8LinearState::kWeight, in_weight.contiguous());
    const at::Tensor in_bias_cast = in_bias.to(dtype);
    const kernels::Fp8Operand x_operand =
        operand(x8.data, x8.scale_inverse, kernels::Fp8Format::kE4M3);
    const kernels::Fp8Operand in_operand =
        operand(in8.data, in8.scale_inverse, kernels::Fp8Format::kE4M3);
    const at::Tensor pre_activation = at::empty({m, f}, rows.options());
    at::Tensor activated = at::empty({m, f}, rows.options());
    if (!try_gelu_product(x_operand, in_operand, m, d, f, in_bias_cast, activated,
                          pre_activation)) {
      product(x_operand, in_operand, m, d, f, in_bias_cast, pre_activation, at::Tensor(),
              /*fast_accumulation=*/true);
      activated = at::gelu(pre_activation, "tanh");
    }
    const Cast a8 = out_state->cast(Fp8LinearState::kInput, activated);
    const Cast out8 = out_state->cast_transposed(Fp8LinearState::kWeight, out_weight.contiguous());
    const at::Tensor out = at::empty({m, out_weight.size(0)}, rows.options());
    product(operand(a8.data, a8.scale_inverse, kernels::Fp8Format::kE4M3),
            operand(out8.data, out8.scale_inverse, kernels::Fp8Format::kE4M3), m, f,
            out_weight.size(0), out_bias.to(dtype), out, at::Tensor(), /*fast_accumulation=*/true);
    ctx->save_for_backward({rows, pre_activation, activated, in8.transposed, in8.scale_inverse,
                            out8.transposed, out8.scale_inverse, in_weight, in_bias, out_weight,
                            out_bias});
    ctx->saved_data["in_state"] = reinterpret_cast<int64_t>(in_state);
    ctx->saved_data["out_state"] = reinterpret_cast<int64_t>(out_state);
    return out.view(with_last_size(x.sizes(), out_weight.size(0)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &pre_activation = saved[1], &activated = saved[2],
                     &in_t8 = saved[3], &in_scale = saved[4], &out_t8 = saved[5],
                     &out_scale = saved[6], &in_weight = saved[7], &in_bias = saved[8],
                     &out_weight = saved[9], &out_bias = saved[10];
    const c10::cuda::CUDAGuard guard(rows.device());
    const at::Tensor grad = linear_rows(grads[0]);
    const int64_t m = grad.size(0), d = rows.size(1), f = pre_activation.size(1);
    const LinearGrads out_grads =
        linear_param_grads(grad, activated, out_weight.scalar_type(), out_bias.scalar_type());
    const Cast g8 = state_of(ctx, "out_state")->cast(Fp8LinearState::kOutputGradient, grad);
    const at::Tensor grad_activated = at::empty({m, f}, grad.options());
    product(operand(g8.data, g8.scale_inverse, kernels::Fp8Format::kE5M2),
            operand(out_t8, out_scale, kernels::Fp8Format::kE4M3), m, grad.size(1), f, at::Tensor(),
            grad_activated, at::Tensor(), /*fast_accumulation=*/false);
    // GELU's derivative as ATen's pass, as in the bf16 path (docs/KERNELS.md, version 6).
    const at::Tensor grad_pre = at::gelu_backward(grad_activated, pre_activation, "tanh");
    const LinearGrads in_grads =
        linear_param_grads(grad_pre, rows, in_weight.scalar_type(), in_bias.scalar_type());
    at::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      const Cast p8 = state_of(ctx, "in_state")->cast(Fp8LinearState::kOutputGradient, grad_pre);
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

Fp8LinearState::Cast Fp8LinearState::cast(Role role, const at::Tensor& x) {
  const at::Tensor source = aligned(x.contiguous());
  Cast cast{at::empty(source.sizes(), source.options().dtype(at::kByte)), at::Tensor(),
            at::empty({1}, source.options().dtype(at::kFloat))};
  const kernels::Fp8Scaling scaling = scaling_for(role, source, cast.scale_inverse);
  if (!kernels::fp8_cast(source.data_ptr(), precision_of(source), source.numel(), format_of(role),
                         scaling, cast.data.data_ptr(), at::cuda::getCurrentCUDAStream())) {
    throw std::logic_error("Fp8LinearState::cast: " + std::to_string(source.numel()) +
                           " elements, not a multiple of 8 (fp8_linear_applies lets none through)");
  }
  return cast;
}

Fp8LinearState::Cast Fp8LinearState::cast_transposed(Role role, const at::Tensor& matrix) {
  const at::Tensor source = aligned(matrix.contiguous());
  const int64_t rows = source.size(0), cols = source.size(1);
  const at::TensorOptions bytes = source.options().dtype(at::kByte);
  Cast cast{at::empty({rows, cols}, bytes), at::empty({cols, rows}, bytes),
            at::empty({1}, source.options().dtype(at::kFloat))};
  const kernels::Fp8Scaling scaling = scaling_for(role, source, cast.scale_inverse);
  kernels::fp8_cast_transposed(source.data_ptr(), precision_of(source), rows, cols, format_of(role),
                               scaling, cast.data.data_ptr(), cast.transposed.data_ptr(),
                               at::cuda::getCurrentCUDAStream());
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

Fp8LinearState::Cast Fp8LinearState::cast(Role, const at::Tensor&) {
  throw std::logic_error("FP8 casts need the fused CUDA kernels, which this build lacks");
}

Fp8LinearState::Cast Fp8LinearState::cast_transposed(Role, const at::Tensor&) {
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
