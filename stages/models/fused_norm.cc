#include "models/fused_norm.h"

#include "models/token_split.h"
#include "wam/error.h"

#if WAM_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/adaln.h"
#include "kernels/rms_norm_rope.h"
#endif

namespace wam::models {

#if WAM_FUSED_KERNELS
namespace {

// x [B, N, W] (rows and samples strided), out (and grad_out) [B, N, W] with unit stride in W,
// grad_x rows grad_x_row_stride apart.
kernels::RmsNormRopeShape shape_of(const at::Tensor& x, const at::Tensor& out,
                                   int64_t grad_x_row_stride, int64_t head_dim) {
  kernels::RmsNormRopeShape shape;
  shape.rows = x.size(0) * x.size(1);
  shape.width = x.size(2);
  shape.head_dim = head_dim;
  shape.tokens = x.size(1);
  shape.x_row_stride = x.stride(1);
  shape.x_sample_stride = x.stride(0);
  shape.out_row_stride = out.stride(1);
  shape.out_sample_stride = out.stride(0);
  shape.grad_x_row_stride = grad_x_row_stride;
  return shape;
}

// The shape of x [B, N, W] with a contiguous output and gradient.
kernels::RmsNormRopeShape shape_of(const at::Tensor& x, int64_t head_dim) {
  kernels::RmsNormRopeShape shape = shape_of(x, x, x.size(2), head_dim);
  shape.out_row_stride = x.size(2);
  shape.out_sample_stride = x.size(1) * x.size(2);
  return shape;
}

kernels::Precision precision_of(const at::Tensor& x) {
  return x.scalar_type() == at::kBFloat16 ? kernels::Precision::kBFloat16
                                          : kernels::Precision::kFloat32;
}

const float* pairs_or_null(const at::Tensor& rotation_pairs) {
  return rotation_pairs.numel() > 0 ? rotation_pairs.data_ptr<float>() : nullptr;
}

const float* bias_or_null(const at::Tensor& bias) {
  return bias.numel() > 0 ? bias.data_ptr<float>() : nullptr;
}

// FusedLayerNormModulate's grad_channel when there is none (autograd takes no undefined inputs).
at::Tensor no_grad_channel(const at::Tensor& x) { return at::empty({0}, x.options()); }

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
    at::Tensor partials =
        at::empty({kernels::rms_norm_rope_backward_blocks(shape), shape.width}, weight.options());
    kernels::rms_norm_rope_backward(grad_out.data_ptr(), x.data_ptr(), weight.data_ptr<float>(),
                                    pairs_or_null(rotation_pairs), rstd.data_ptr<float>(),
                                    grad_x.data_ptr(), partials.data_ptr<float>(), shape,
                                    precision_of(x), at::cuda::getCurrentCUDAStream().stream());
    return {grad_x, partials.sum(0), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Whether the action expert's QKV rows follow the video expert's in one buffer [B, Nv + Na, 3W]
// (epilogue_joint_linear_into wrote them there): then that buffer's v columns are the joint v.
bool rows_of_one_buffer(const at::Tensor& video_qkv, const at::Tensor& action_qkv) {
  const int64_t tokens = video_qkv.size(1) + action_qkv.size(1), row = video_qkv.size(2);
  return video_qkv.storage().is_alias_of(action_qkv.storage()) &&
         action_qkv.storage_offset() == video_qkv.storage_offset() + video_qkv.size(1) * row &&
         video_qkv.stride(0) == tokens * row && action_qkv.stride(0) == tokens * row;
}

// The joint v [B, N, W] over the buffer both experts' QKV rows lie in: a tensor of its own over
// that memory, not an autograd view of the video input.
at::Tensor v_in_one_buffer(const at::Tensor& video_qkv, int64_t tokens) {
  const int64_t width = video_qkv.size(2) / 3;
  return at::empty({0}, video_qkv.options())
      .set_(video_qkv.storage(), video_qkv.storage_offset() + 2 * width,
            {video_qkv.size(0), tokens, width}, {video_qkv.stride(0), 3 * width, 1});
}

// The joint attention's q, k and v [B, Nv + Na, W] from the two experts' fused QKV products
// [B, Nv, 3W] and [B, Na, 3W]: RMSNorm + RoPE of each expert's q and k written straight into the
// joint tensors, v read in place where both products' rows are one buffer's (docs/KERNELS.md,
// version 45) and copied otherwise, and backward writing each expert's q/k/v gradients straight
// into one [B, N, 3W] gradient of its QKV product. Per expert and part this is
// fused_rms_norm_rope; the point is the layout: no concatenation of q, k and v forward, no
// contiguous copies of their gradients' slices and no concatenation of the QKV split's gradients
// backward (docs/KERNELS.md, version 5).
class FusedJointQkv : public torch::autograd::Function<FusedJointQkv> {
 public:
  // weights: float [W] each, q then k per expert (video, action); rotations as FusedRmsNormRope's.
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, const at::Tensor& video_qkv,
      const at::Tensor& action_qkv, const at::Tensor& video_q_weight,
      const at::Tensor& video_k_weight, const at::Tensor& action_q_weight,
      const at::Tensor& action_k_weight, const at::Tensor& video_rotation,
      const at::Tensor& action_rotation, int64_t head_dim, double eps) {
    const c10::cuda::CUDAGuard guard(video_qkv.device());
    const int64_t batch = video_qkv.size(0), width = video_qkv.size(2) / 3,
                  tokens = video_qkv.size(1) + action_qkv.size(1);
    const at::Tensor experts[2] = {video_qkv, action_qkv},
                     rotations[2] = {video_rotation, action_rotation},
                     weights[2][2] = {{video_q_weight, video_k_weight},
                                      {action_q_weight, action_k_weight}};
    const bool v_in_place = rows_of_one_buffer(video_qkv, action_qkv);
    at::Tensor joint[3];
    for (int part = 0; part < 3; ++part) {
      joint[part] = part == 2 && v_in_place
                        ? v_in_one_buffer(video_qkv, tokens)
                        : at::empty({batch, tokens, width}, video_qkv.options());
    }
    std::vector<at::Tensor> rstds;
    int64_t first = 0;
    for (int e = 0; e < 2; ++e) {
      const int64_t rows = experts[e].size(1);
      for (int part = 0; part < 2; ++part) {
        const at::Tensor x = experts[e].narrow(2, part * width, width),
                         out = joint[part].narrow(1, first, rows);
        at::Tensor rstd = at::empty({batch, rows}, x.options().dtype(at::kFloat));
        kernels::rms_norm_rope_forward(
            x.data_ptr(), weights[e][part].data_ptr<float>(), pairs_or_null(rotations[e]),
            out.data_ptr(), rstd.data_ptr<float>(), shape_of(x, out, 3 * width, head_dim),
            static_cast<float>(eps), precision_of(x), at::cuda::getCurrentCUDAStream().stream());
        rstds.push_back(rstd);
      }
      if (!v_in_place) {
        copy_token_rows(joint[2].narrow(1, first, rows), experts[e].narrow(2, 2 * width, width));
      }
      first += rows;
    }
    ctx->save_for_backward({video_qkv, action_qkv, video_q_weight, video_k_weight, action_q_weight,
                            action_k_weight, video_rotation, action_rotation, rstds[0], rstds[1],
                            rstds[2], rstds[3]});
    ctx->saved_data["head_dim"] = head_dim;
    return {joint[0], joint[1], joint[2]};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor experts[2] = {saved[0], saved[1]};
    const c10::cuda::CUDAGuard guard(experts[0].device());
    const int64_t head_dim = ctx->saved_data["head_dim"].toInt(), width = experts[0].size(2) / 3;
    at::Tensor joint_grads[3];
    for (int part = 0; part < 3; ++part) {
      joint_grads[part] =
          grads[part].defined()
              ? grads[part].to(experts[0].scalar_type())
              : at::zeros({experts[0].size(0), experts[0].size(1) + experts[1].size(1), width},
                          experts[0].options());
      // The kernels take any row and sample strides, not a transposed layout.
      if (joint_grads[part].stride(2) != 1) joint_grads[part] = joint_grads[part].contiguous();
    }
    torch::autograd::variable_list out(10);  // one per input of forward
    int64_t first = 0;
    for (int e = 0; e < 2; ++e) {
      const int64_t rows = experts[e].size(1);
      at::Tensor grad_qkv = at::empty_like(experts[e], at::MemoryFormat::Contiguous);
      // q's and k's weight-gradient partials in one buffer, summed by one reduction.
      at::Tensor partials;
      for (int part = 0; part < 2; ++part) {
        const at::Tensor x = experts[e].narrow(2, part * width, width),
                         grad_out = joint_grads[part].narrow(1, first, rows),
                         grad_x = grad_qkv.narrow(2, part * width, width),
                         &weight = saved[2 + 2 * e + part];
        const kernels::RmsNormRopeShape shape = shape_of(x, grad_out, 3 * width, head_dim);
        if (part == 0) {
          partials = at::empty({2, kernels::rms_norm_rope_backward_blocks(shape), width},
                               weight.options());
        }
        kernels::rms_norm_rope_backward(grad_out.data_ptr(), x.data_ptr(), weight.data_ptr<float>(),
                                        pairs_or_null(saved[6 + e]),
                                        saved[8 + 2 * e + part].data_ptr<float>(),
                                        grad_x.data_ptr(), partials[part].data_ptr<float>(), shape,
                                        precision_of(x), at::cuda::getCurrentCUDAStream().stream());
      }
      const at::Tensor sums = partials.sum(1);
      out[2 + 2 * e] = sums[0];
      out[3 + 2 * e] = sums[1];
      copy_token_rows(grad_qkv.narrow(2, 2 * width, width), joint_grads[2].narrow(1, first, rows));
      out[e] = grad_qkv;
      first += rows;
    }
    return out;
  }
};

// The modulation rows of x [B, N, D] under `layout`: the segment rows [B, S, D] picked per group,
// as float [B * groups, D].
at::Tensor rows_per_group(const at::Tensor& rows, const TokenGroups& layout) {
  const at::Tensor grouped =
      layout.segment_of_group.defined() ? rows.index_select(1, layout.segment_of_group) : rows;
  return grouped.to(at::kFloat).contiguous().view({-1, grouped.size(2)});
}

// x [B, N, D], one modulation row per run of N / groups tokens, sample_stride rows per sample
// (0: rows shared by every sample).
kernels::ModulationLayout layout_of(const at::Tensor& x, int64_t groups, int64_t sample_stride) {
  kernels::ModulationLayout layout;
  layout.rows = x.size(0) * x.size(1);
  layout.width = x.size(2);
  layout.tokens = x.size(1);
  layout.run = x.size(1) / groups;
  layout.sample_stride = sample_stride;
  return layout;
}

kernels::ModulationLayout saved_layout(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
  return layout_of(x, ctx->saved_data["groups"].toInt(), ctx->saved_data["sample_stride"].toInt());
}

// The backward kernels' per-block partial sums of `count` gradients, float [count, blocks, D]:
// one buffer, so that one reduction sums them all (each is a kernel launch of a few
// microseconds over a few MB; docs/KERNELS.md, version 18).
at::Tensor partials_for(const kernels::ModulationLayout& layout, const at::Tensor& rows,
                        int64_t count) {
  return at::empty({count, kernels::adaln_backward_blocks(layout), layout.width}, rows.options());
}

// The modulation rows' gradients [count, modulation_rows, D] from the per-block partials:
// consecutive blocks share a modulation row, and ATen's sum adds them up in the same order on
// every run.
at::Tensor sum_partials(const at::Tensor& partials, const kernels::ModulationLayout& layout) {
  const int64_t count = partials.size(0);
  const int64_t blocks_per_run = layout.run / kernels::adaln_backward_rows_per_block(layout);
  const at::Tensor per_run = partials.view({count, -1, blocks_per_run, layout.width}).sum(2);
  if (layout.sample_stride != 0) return per_run;  // [count, B * tokens / run, D]
  return per_run.view({count, -1, layout.tokens / layout.run, layout.width}).sum(1);
}

// LayerNorm without affine, then scale_rows and shift_rows (float [M, D]) per `groups` and
// `sample_stride`, written in out_dtype. `pass_input`: x itself as a second output (the residual
// path's), whose gradient the backward kernel adds into x's. grad_channel: x's producer's
// (epilogue_linear_residual's LinearResidual), given x's gradient in bfloat16 by the same kernel;
// empty for none.
class FusedLayerNormModulate : public torch::autograd::Function<FusedLayerNormModulate> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, const at::Tensor& scale_rows,
                                                const at::Tensor& shift_rows, int64_t groups,
                                                int64_t sample_stride, at::ScalarType out_dtype,
                                                double eps, bool pass_input,
                                                const at::Tensor& grad_channel) {
    const c10::cuda::CUDAGuard guard(x.device());
    const kernels::ModulationLayout layout = layout_of(x, groups, sample_stride);
    at::Tensor out = at::empty(x.sizes(), x.options().dtype(out_dtype));
    const auto row_options = x.options().dtype(at::kFloat);
    at::Tensor mean = at::empty({layout.rows}, row_options), rstd = at::empty_like(mean);
    kernels::layer_norm_modulate_forward(
        x.data_ptr(), precision_of(x), scale_rows.data_ptr<float>(), shift_rows.data_ptr<float>(),
        out.data_ptr(), precision_of(out), mean.data_ptr<float>(), rstd.data_ptr<float>(), layout,
        static_cast<float>(eps), at::cuda::getCurrentCUDAStream().stream());
    ctx->save_for_backward({x, scale_rows, mean, rstd});
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["sample_stride"] = sample_stride;
    ctx->saved_data["out_dtype"] = static_cast<int64_t>(out_dtype);
    ctx->saved_data["pass_input"] = pass_input;
    ctx->saved_data["grad_in_bf16"] = grad_channel.numel() > 0;
    if (pass_input) return {out, x};
    return {out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &scale_rows = saved[1], &mean = saved[2], &rstd = saved[3];
    const c10::cuda::CUDAGuard guard(x.device());
    const auto out_dtype = static_cast<at::ScalarType>(ctx->saved_data["out_dtype"].toInt());
    const at::Tensor grad_out = grads[0].to(out_dtype).contiguous();
    const kernels::ModulationLayout layout = saved_layout(ctx, x);
    at::Tensor grad_residual;
    if (ctx->saved_data["pass_input"].toBool()) {
      grad_residual = grads[1].to(x.scalar_type()).contiguous();
    }
    at::Tensor grad_x = at::empty_like(x), grad_x_bf16;
    if (ctx->saved_data["grad_in_bf16"].toBool()) {
      grad_x_bf16 = at::empty(x.sizes(), x.options().dtype(at::kBFloat16));
    }
    const at::Tensor partials = partials_for(layout, scale_rows, 2);  // scale's, shift's
    kernels::layer_norm_modulate_backward(
        grad_out.data_ptr(), precision_of(grad_out), x.data_ptr(), precision_of(x),
        scale_rows.data_ptr<float>(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
        grad_residual.defined() ? grad_residual.data_ptr() : nullptr, grad_x.data_ptr(),
        grad_x_bf16.defined() ? grad_x_bf16.data_ptr() : nullptr, partials[0].data_ptr<float>(),
        partials[1].data_ptr<float>(), layout, at::cuda::getCurrentCUDAStream().stream());
    const at::Tensor sums = sum_partials(partials, layout);
    return {grad_x,       sums[0],      sums[1],      at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), grad_x_bf16};
  }
};

// residual + (update + bias) * gate_rows (float [M, D]) per `groups`, in the residual's dtype.
// bias: float [D], or empty for none (autograd takes no undefined inputs); its gradient is summed
// in the backward kernel that writes the update's.
class FusedAddGated : public torch::autograd::Function<FusedAddGated> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& residual,
                            const at::Tensor& update, const at::Tensor& gate_rows,
                            const at::Tensor& bias, int64_t groups) {
    const c10::cuda::CUDAGuard guard(residual.device());
    const int64_t sample_stride = gate_rows.size(0) / residual.size(0);
    at::Tensor out = at::empty_like(residual);
    kernels::gated_residual_forward(
        residual.data_ptr(), precision_of(residual), update.data_ptr(), precision_of(update),
        bias_or_null(bias), gate_rows.data_ptr<float>(), out.data_ptr(),
        layout_of(residual, groups, sample_stride), at::cuda::getCurrentCUDAStream().stream());
    ctx->save_for_backward({update, gate_rows, bias});
    ctx->saved_data["groups"] = groups;
    ctx->saved_data["sample_stride"] = sample_stride;
    ctx->saved_data["residual_dtype"] = static_cast<int64_t>(residual.scalar_type());
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const at::Tensor &update = saved[0], &gate_rows = saved[1], &bias = saved[2];
    const c10::cuda::CUDAGuard guard(update.device());
    const auto residual_dtype =
        static_cast<at::ScalarType>(ctx->saved_data["residual_dtype"].toInt());
    const at::Tensor grad_out = grads[0].to(residual_dtype).contiguous();
    const kernels::ModulationLayout layout = saved_layout(ctx, grad_out);
    const bool with_bias = bias.numel() > 0;
    at::Tensor grad_update = at::empty_like(update),
               partials = partials_for(layout, gate_rows, with_bias ? 2 : 1);  // gate's, bias's
    kernels::gated_residual_backward(
        grad_out.data_ptr(), precision_of(grad_out), update.data_ptr(), precision_of(update),
        bias_or_null(bias), gate_rows.data_ptr<float>(), grad_update.data_ptr(),
        partials[0].data_ptr<float>(), with_bias ? partials[1].data_ptr<float>() : nullptr, layout,
        at::cuda::getCurrentCUDAStream().stream());
    const at::Tensor sums = sum_partials(partials, layout);
    return {grad_out, grad_update, sums[0], with_bias ? sums[1].sum(0) : at::Tensor(),
            at::Tensor()};
  }
};

bool aligned(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// t contiguous and 16-byte aligned, as the RMSNorm kernels' 4-float loads of the weight and
// rotation rows need: t itself where it already is (a parameter, a whole table), else a copy.
at::Tensor vector_aligned(const at::Tensor& t) {
  const at::Tensor contiguous = t.contiguous();
  return aligned(contiguous) ? contiguous : contiguous.clone();
}

bool float_or_bfloat16(at::ScalarType dtype) {
  return dtype == at::kFloat || dtype == at::kBFloat16;
}

// A float32 output may not come from a bfloat16 input (the kernels' pairs, adaln.h).
bool narrows_or_keeps(at::ScalarType from, at::ScalarType to) {
  return float_or_bfloat16(from) && float_or_bfloat16(to) &&
         !(from == at::kBFloat16 && to == at::kFloat);
}

void require_applies(bool ok, const char* what) {
  if (!ok) throw Error(std::string(what) + ": unsupported input (check its *_applies function)");
}

}  // namespace

bool fused_kernels_built() { return true; }

bool fused_rms_norm_rope_applies(const at::Tensor& x, int64_t head_dim) {
  if (!x.is_cuda() || x.dim() != 3 || x.size(0) == 0 || x.size(1) == 0) return false;
  if (x.scalar_type() != at::kFloat && x.scalar_type() != at::kBFloat16) return false;
  if (x.stride(2) != 1 || x.stride(0) != x.size(1) * x.stride(1)) return false;
  // The kernels load 4 elements at once.
  if (reinterpret_cast<uintptr_t>(x.data_ptr()) % (4 * x.element_size()) != 0) return false;
  return kernels::rms_norm_rope_supports(shape_of(x, head_dim));
}

at::Tensor fused_rms_norm_rope(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& rotation, int64_t head_dim, double eps) {
  if (!fused_rms_norm_rope_applies(x, head_dim) || weight.scalar_type() != at::kFloat) {
    throw Error("fused_rms_norm_rope: unsupported input (check fused_rms_norm_rope_applies)");
  }
  const at::Tensor pairs = rotation.defined() ? vector_aligned(at::view_as_real(rotation))
                                              : at::empty({0}, x.options().dtype(at::kFloat));
  return FusedRmsNormRope::apply(x, vector_aligned(weight), pairs, head_dim, eps);
}

bool fused_joint_qkv_applies(const at::Tensor& video_qkv, const at::Tensor& action_qkv,
                             int64_t head_dim) {
  for (const at::Tensor& qkv : {video_qkv, action_qkv}) {
    if (!qkv.is_cuda() || qkv.dim() != 3 || qkv.size(0) == 0 || qkv.size(1) == 0) return false;
    // Rows contiguous, samples any distance apart (each expert's rows of one joint buffer).
    if (qkv.stride(2) != 1 || qkv.stride(1) != qkv.size(2) ||
        qkv.stride(0) < qkv.size(1) * qkv.stride(1) || qkv.size(2) != video_qkv.size(2) ||
        qkv.size(2) % 3 != 0) {
      return false;
    }
    if (qkv.scalar_type() != video_qkv.scalar_type() || !float_or_bfloat16(qkv.scalar_type())) {
      return false;
    }
    if (qkv.size(0) != video_qkv.size(0) || !aligned(qkv)) return false;
  }
  const int64_t width = video_qkv.size(2) / 3, tokens = video_qkv.size(1) + action_qkv.size(1);
  const at::Tensor x = video_qkv.narrow(2, 0, width);
  kernels::RmsNormRopeShape shape = shape_of(x, x, 3 * width, head_dim);
  shape.out_row_stride = width;
  shape.out_sample_stride = tokens * width;
  return width % 2 == 0 && kernels::rms_norm_rope_supports(shape);
}

JointQkv fused_joint_qkv(const at::Tensor& video_qkv, const at::Tensor& action_qkv,
                         const QkNormWeights& video, const QkNormWeights& action,
                         const at::Tensor& video_rotation, const at::Tensor& action_rotation,
                         int64_t head_dim, double eps) {
  require_applies(fused_joint_qkv_applies(video_qkv, action_qkv, head_dim) &&
                      video.q.scalar_type() == at::kFloat && video.k.scalar_type() == at::kFloat &&
                      action.q.scalar_type() == at::kFloat && action.k.scalar_type() == at::kFloat,
                  "fused_joint_qkv");
  const auto pairs = [&](const at::Tensor& rotation) {
    return rotation.defined() ? vector_aligned(at::view_as_real(rotation))
                              : at::empty({0}, video_qkv.options().dtype(at::kFloat));
  };
  torch::autograd::variable_list joint =
      FusedJointQkv::apply(video_qkv, action_qkv, vector_aligned(video.q), vector_aligned(video.k),
                           vector_aligned(action.q), vector_aligned(action.k),
                           pairs(video_rotation), pairs(action_rotation), head_dim, eps);
  return {joint[0], joint[1], joint[2]};
}

bool fused_norm_modulate_applies(const at::Tensor& x, const TokenGroups& layout,
                                 at::ScalarType dtype) {
  if (!x.is_cuda() || x.dim() != 3 || x.numel() == 0 || !x.is_contiguous() || !aligned(x)) {
    return false;
  }
  if (!narrows_or_keeps(x.scalar_type(), dtype) || x.size(1) % layout.groups != 0) return false;
  return kernels::adaln_supports(layout_of(x, layout.groups, layout.groups));
}

at::Tensor fused_norm_modulate(const at::Tensor& x, const at::Tensor& shift,
                               const at::Tensor& scale, const TokenGroups& layout,
                               at::ScalarType dtype, double eps) {
  require_applies(fused_norm_modulate_applies(x, layout, dtype), "fused_norm_modulate");
  return FusedLayerNormModulate::apply(x, rows_per_group(1 + scale, layout),
                                       rows_per_group(shift, layout), layout.groups, layout.groups,
                                       dtype, eps, /*pass_input=*/false, no_grad_channel(x))[0];
}

NormedAndResidual fused_norm_modulate_and_residual(const at::Tensor& x, const at::Tensor& shift,
                                                   const at::Tensor& scale,
                                                   const TokenGroups& layout, at::ScalarType dtype,
                                                   double eps, const at::Tensor& grad_channel) {
  require_applies(fused_norm_modulate_applies(x, layout, dtype),
                  "fused_norm_modulate_and_residual");
  const bool channel_taken = grad_channel.defined() && x.scalar_type() == at::kFloat &&
                             grad_channel.scalar_type() == at::kBFloat16 &&
                             grad_channel.sizes() == x.sizes();
  const torch::autograd::variable_list outs = FusedLayerNormModulate::apply(
      x, rows_per_group(1 + scale, layout), rows_per_group(shift, layout), layout.groups,
      layout.groups, dtype, eps, /*pass_input=*/true,
      channel_taken ? grad_channel : no_grad_channel(x));
  return {outs[0], outs[1]};
}

namespace {

// fused_layer_norm's op, with x as a second output where `pass_input`.
torch::autograd::variable_list layer_norm_op(const at::Tensor& x, const at::Tensor& weight,
                                             const at::Tensor& bias, at::ScalarType dtype,
                                             double eps, bool pass_input) {
  require_applies(fused_norm_modulate_applies(x, TokenGroups{}, dtype) &&
                      weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
                  "fused_layer_norm");
  return FusedLayerNormModulate::apply(x, weight.view({1, -1}), bias.view({1, -1}), 1,
                                       /*sample_stride=*/0, dtype, eps, pass_input,
                                       no_grad_channel(x));
}

}  // namespace

at::Tensor fused_layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                            at::ScalarType dtype, double eps) {
  return layer_norm_op(x, weight, bias, dtype, eps, /*pass_input=*/false)[0];
}

NormedAndResidual fused_layer_norm_and_residual(const at::Tensor& x, const at::Tensor& weight,
                                                const at::Tensor& bias, at::ScalarType dtype,
                                                double eps) {
  const torch::autograd::variable_list outs =
      layer_norm_op(x, weight, bias, dtype, eps, /*pass_input=*/true);
  return {outs[0], outs[1]};
}

bool fused_add_gated_applies(const at::Tensor& residual, const at::Tensor& update,
                             const TokenGroups& layout) {
  return residual.sizes() == update.sizes() &&
         fused_norm_modulate_applies(residual, layout, residual.scalar_type()) &&
         fused_norm_modulate_applies(update, layout, update.scalar_type()) &&
         narrows_or_keeps(residual.scalar_type(), update.scalar_type());
}

at::Tensor fused_add_gated(const at::Tensor& residual, const at::Tensor& update,
                           const at::Tensor& gate, const TokenGroups& layout) {
  require_applies(fused_add_gated_applies(residual, update, layout), "fused_add_gated");
  return FusedAddGated::apply(residual, update, rows_per_group(gate, layout),
                              at::empty({0}, gate.options().dtype(at::kFloat)), layout.groups);
}

bool fused_add_biased_gated_applies(const at::Tensor& residual, const at::Tensor& update,
                                    const at::Tensor& bias, const TokenGroups& layout) {
  return fused_add_gated_applies(residual, update, layout) && bias.is_cuda() && bias.dim() == 1 &&
         bias.size(0) == update.size(2) && bias.scalar_type() == at::kFloat;
}

at::Tensor fused_add_biased_gated(const at::Tensor& residual, const at::Tensor& update,
                                  const at::Tensor& bias, const at::Tensor& gate,
                                  const TokenGroups& layout) {
  require_applies(fused_add_biased_gated_applies(residual, update, bias, layout),
                  "fused_add_biased_gated");
  return FusedAddGated::apply(residual, update, rows_per_group(gate, layout), bias.contiguous(),
                              layout.groups);
}

#else

bool fused_kernels_built() { return false; }

bool fused_rms_norm_rope_applies(const at::Tensor&, int64_t) { return false; }

bool fused_joint_qkv_applies(const at::Tensor&, const at::Tensor&, int64_t) { return false; }

JointQkv fused_joint_qkv(const at::Tensor&, const at::Tensor&, const QkNormWeights&,
                         const QkNormWeights&, const at::Tensor&, const at::Tensor&, int64_t,
                         double) {
  throw Error("fused_joint_qkv: this build has no fused CUDA kernels (no CUDA compiler)");
}

at::Tensor fused_rms_norm_rope(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                               double) {
  throw Error("fused_rms_norm_rope: this build has no fused CUDA kernels (no CUDA compiler)");
}

bool fused_norm_modulate_applies(const at::Tensor&, const TokenGroups&, at::ScalarType) {
  return false;
}

bool fused_add_gated_applies(const at::Tensor&, const at::Tensor&, const TokenGroups&) {
  return false;
}

bool fused_add_biased_gated_applies(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const TokenGroups&) {
  return false;
}

at::Tensor fused_norm_modulate(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               const TokenGroups&, at::ScalarType, double) {
  throw Error("fused_norm_modulate: this build has no fused CUDA kernels (no CUDA compiler)");
}

at::Tensor fused_layer_norm(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::ScalarType,
                            double) {
  throw Error("fused_layer_norm: this build has no fused CUDA kernels (no CUDA compiler)");
}

NormedAndResidual fused_norm_modulate_and_residual(const at::Tensor&, const at::Tensor&,
                                                   const at::Tensor&, const TokenGroups&,
                                                   at::ScalarType, double, const at::Tensor&) {
  throw Error(
      "fused_norm_modulate_and_residual: this build has no fused CUDA kernels (no CUDA compiler)");
}

NormedAndResidual fused_layer_norm_and_residual(const at::Tensor&, const at::Tensor&,
                                                const at::Tensor&, at::ScalarType, double) {
  throw Error(
      "fused_layer_norm_and_residual: this build has no fused CUDA kernels (no CUDA compiler)");
}

at::Tensor fused_add_gated(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                           const TokenGroups&) {
  throw Error("fused_add_gated: this build has no fused CUDA kernels (no CUDA compiler)");
}

at::Tensor fused_add_biased_gated(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                  const at::Tensor&, const TokenGroups&) {
  throw Error("fused_add_biased_gated: this build has no fused CUDA kernels (no CUDA compiler)");
}

#endif

}  // namespace wam::models
