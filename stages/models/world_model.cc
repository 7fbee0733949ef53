// The MoT world action model (docs/DESIGN.md section 5.5): a Wan-style video expert and an
// action expert, each with its own weights, joined per layer in one masked self-attention over
// [video tokens, future-delta queries, action tokens], trained with a flow-matching loss.
//
// Everything in loss() is device-side tensor work with static shapes (no host reads of tensor
// values), so TrainStep can capture a whole step as a CUDA graph.
#include "models/world_model.h"

#include <torch/version.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "models/activation_checkpoint.h"
#include "models/constant_rows_linear.h"
#include "models/epilogue_linear.h"
#include "models/fp8_linear.h"
#include "models/fused_norm.h"
#include "models/modulation.h"
#include "models/token_split.h"
#include "wam/error.h"

#if WAM_WITH_CUDA
#include <ATen/autocast_mode.h>
#endif

namespace wam::models {
namespace {

constexpr double kNormEps = 1e-6;
constexpr double kRopeTheta = 10000.0;
constexpr double kNumTrainTimesteps = 1000.0;  // sigma in [0,1] -> timestep in [0,1000]
constexpr int64_t kPatch = 2;                  // patch (1,2,2): frames are not merged
// Latent frames on the video stream, in order: anchor, recent, current, then the future frames.
// The first three are clean conditions; the future-delta queries sit one frame after the last.
constexpr int64_t kConditionFrames = 3;
constexpr int64_t kRecentFrame = 1;

// ---------------------------------------------------------------------------------------------
// Config parsing.

// Throws every problem found in a model config as one wam::Error.
void throw_config_problems(const Diagnostics& diagnostics) {
  if (diagnostics.empty()) return;
  std::vector<std::string> problems;
  for (const Diagnostic& d : diagnostics.items()) {
    // The location is "/key".
    problems.push_back("model config key \"" + d.location.substr(1) + "\": " + d.message);
  }
  throw Error(join(problems, "; "));
}

// For configs built in code, which skip from_json.
void check_consistency(const MoTConfig& config) {
  Diagnostics diagnostics;
  ParamChecker checker("", diagnostics, "");
  config.check(checker);
  throw_config_problems(diagnostics);
}

// ---------------------------------------------------------------------------------------------
// Tensor helpers.

// A Linear layer as PyTorch's nn.Linear applies it: through ATen's linear, which autocast casts
// as a whole and which folds the rows of a contiguous input into one product with the bias in its
// epilogue. The C++ frontend's Linear::forward instead runs a matmul and then `+= bias`, outside
// autocast: a separate pass adding the float32 bias into the bf16 product through ATen's casting
// loop (10.8 ms of a compiled base-preset step, docs/KERNELS.md version 4).
at::Tensor linear(const torch::nn::Linear& layer, const at::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);
}

// A product of the compiled step (`fused`): FP8 where `fp8` is given and it applies
// (fp8_linear), otherwise with the bias gradient from the weight-gradient product's epilogue
// where that applies (epilogue_linear). `state_weight` keys the layer's FP8 state.
at::Tensor fused_product(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                         bool fused, Fp8Linears* fp8, const at::Tensor& state_weight) {
  if (fused && fp8 != nullptr) return fp8_linear(x, weight, bias, fp8->state_for(state_weight));
  if (fused && epilogue_linears_apply(x)) return epilogue_linear(x, weight, bias);
  return at::linear(x, weight, bias);
}

// linear() in the compiled step (`fused`), through fused_product.
at::Tensor linear(const torch::nn::Linear& layer, const at::Tensor& x, bool fused,
                  Fp8Linears* fp8 = nullptr) {
  return fused_product(x, layer->weight, layer->bias, fused, fp8, layer->weight);
}

// Linear, activation, Linear, as a Sequential of the three registers them (parameter names
// "<name>.0.weight", "<name>.2.weight"), each product through linear() above.
template <class Activation>
at::Tensor linear_act_linear(const torch::nn::Sequential& layers, const at::Tensor& x,
                             Activation activation) {
  return linear(torch::nn::Linear(layers->ptr<torch::nn::LinearImpl>(2)),
                activation(linear(torch::nn::Linear(layers->ptr<torch::nn::LinearImpl>(0)), x)));
}

// Linear layers applied to the same input as one GEMM over their concatenated weights: the input
// is read (and cast, under autocast) once, and backward needs no gradient accumulation. The
// compiled step's bfloat16 products read the weights' kept copies in place (epilogue_joint_linear)
// and write their rows of `into` where it is given (epilogue_joint_linear_into).
at::Tensor fused_linear(const at::Tensor& x, std::initializer_list<torch::nn::Linear> layers,
                        bool fused, Fp8Linears* fp8, const TokenRows& into = {}) {
  std::vector<at::Tensor> weights, biases;
  for (const torch::nn::Linear& layer : layers) {
    weights.push_back(layer->weight);
    biases.push_back(layer->bias);
  }
  if (fused && fp8 == nullptr && epilogue_linears_apply(x)) {
    return into.joint.defined() ? epilogue_joint_linear_into(x, weights, biases, into)
                                : epilogue_joint_linear(x, weights, biases);
  }
  return fused_product(x, at::cat(weights), at::cat(biases), fused, fp8,
                       layers.begin()->get()->weight);
}

// fused_linear's product split into the layers' outputs. `constant_rows` [B, S + L, in], when
// defined, are all the input's rows as a constant whose last L hold x's values: projected as one
// product, with an input gradient for x's rows only (for the others it would be a GEMM as large as
// the forward one) and each layer's gradients from its own output's (constant_rows_linear).
std::vector<at::Tensor> fused_linears(const at::Tensor& x,
                                      std::initializer_list<torch::nn::Linear> layers, bool fused,
                                      Fp8Linears* fp8,
                                      const at::Tensor& constant_rows = at::Tensor()) {
  if (constant_rows.defined()) {
    std::vector<at::Tensor> weights, biases;
    for (const torch::nn::Linear& layer : layers) {
      weights.push_back(layer->weight);
      biases.push_back(layer->bias);
    }
    return constant_rows_linear(x, constant_rows, weights, biases);
  }
  std::vector<int64_t> widths;
  for (const torch::nn::Linear& layer : layers) widths.push_back(layer->weight.size(0));
  return fused_linear(x, layers, fused, fp8).split_with_sizes(widths, -1);
}

at::Tensor plain_layer_norm(const at::Tensor& x) {
  return at::layer_norm(x, {x.size(-1)}, {}, {}, kNormEps);
}

// The dtype a matrix product takes x in: autocast's on CUDA when it is on, else x's own.
at::ScalarType matmul_input_dtype(const at::Tensor& x) {
#if WAM_WITH_CUDA
  if (x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) {
    return at::autocast::get_autocast_dtype(at::kCUDA);
  }
#endif
  return x.scalar_type();
}

// AdaLN: LayerNorm without affine, then the segment rows' scale and shift, and x to read as the
// residual after it. `fused` (the compiled step) writes the result in the next product's input
// dtype in the same kernel and passes x through it, so that the gradients of x's two uses meet in
// the norm's backward kernel (NormedAndResidual); the eager baseline keeps ATen's ops and
// autocast's cast, and x as it is. grad_channel: x's, where x is epilogue_linear_residual's output
// (LinearResidual), for the fused kernel to write x's gradient into in bfloat16 as well.
NormedAndResidual modulated_norm(const at::Tensor& x, const at::Tensor& shift,
                                 const at::Tensor& scale, const TokenGroups& layout, bool fused,
                                 const at::Tensor& grad_channel = at::Tensor()) {
  if (!fused) return {modulate(plain_layer_norm(x), shift, scale, layout), x};
  const at::ScalarType dtype = matmul_input_dtype(x);
  if (fused_norm_modulate_applies(x, layout, dtype)) {
    return fused_norm_modulate_and_residual(x, shift, scale, layout, dtype, kNormEps, grad_channel);
  }
  return {modulate_as(plain_layer_norm(x), shift, scale, layout, dtype), x};
}

// residual + update * gate; `fused` (the compiled step) in one kernel, as add_gated.
at::Tensor gated_residual(const at::Tensor& residual, const at::Tensor& update,
                          const at::Tensor& gate, const TokenGroups& layout, bool fused) {
  if (!fused) return residual + gated(update, gate, layout);
  if (fused_add_gated_applies(residual, update, layout)) {
    return fused_add_gated(residual, update, gate, layout);
  }
  return add_gated(residual, update, gate, layout);
}

// residual + (update + bias) * gate, for an update that is a layer's bfloat16 product without its
// bias (the compiled step's epilogue products): the bias added, and its gradient summed, in the
// gated residual's kernels where they apply, instead of in the product's epilogue and a
// reduction over the update's gradient (docs/KERNELS.md, version 24).
at::Tensor biased_gated_residual(const at::Tensor& residual, const at::Tensor& update,
                                 const at::Tensor& bias, const at::Tensor& gate,
                                 const TokenGroups& layout) {
  if (fused_add_biased_gated_applies(residual, update, bias, layout)) {
    return fused_add_biased_gated(residual, update, bias, gate, layout);
  }
  return gated_residual(residual, update + bias.to(update.scalar_type()), gate, layout,
                        /*fused=*/true);
}

// The cross-attention's LayerNorm, and x to read as the residual after it; `fused` (the compiled
// step) writes the next product's input dtype from one kernel each way, x passed through it as in
// modulated_norm.
NormedAndResidual cross_layer_norm(torch::nn::LayerNorm& norm, const at::Tensor& x, bool fused) {
  const at::ScalarType dtype = matmul_input_dtype(x);
  if (fused && fused_norm_modulate_applies(x, TokenGroups{}, dtype)) {
    return fused_layer_norm_and_residual(x, norm->weight, norm->bias, dtype, kNormEps);
  }
  return {norm->forward(x), x};
}

// q, k, v [B, N, H, d]; allowed: bool, broadcastable to [B, H, Nq, Nk], true = may attend, or
// that mask as an additive bias (attention_bias). Every query row must allow at least one key (the
// masks built here always do).
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& allowed) {
  const int64_t batch = q.size(0), tokens = q.size(1);
  at::Tensor qh = q.transpose(1, 2), kh = k.transpose(1, 2), vh = v.transpose(1, 2);
#if TORCH_VERSION_MAJOR >= 2
  // Public SDPA (LibTorch >= 2.0) picks a fused kernel on CUDA (cuDNN's flash attention on the
  // H200 with LibTorch 2.11) and the math kernel on CPU.
  at::Tensor out = at::scaled_dot_product_attention(qh, kh, vh, allowed);
#else
  // LibTorch 1.13 exposes only the private _scaled_dot_product_attention: plain softmax attention.
  at::Tensor scores = at::matmul(qh, kh.transpose(-2, -1)) * (1.0 / std::sqrt(double(q.size(3))));
  scores = allowed.scalar_type() == at::kBool
               ? scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity())
               : scores + allowed;
  at::Tensor out = at::matmul(at::softmax(scores, -1, at::kFloat).to(vh.scalar_type()), vh);
#endif
  return out.transpose(1, 2).reshape({batch, tokens, -1});
}

// [B, C, F, h, w] -> [B, F*(h/2)*(w/2), C*4], tokens frame-major then row-major.
at::Tensor patchify(const at::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), f = x.size(2), hp = x.size(3) / kPatch,
                wp = x.size(4) / kPatch;
  return x.reshape({b, c, f, hp, kPatch, wp, kPatch})
      .permute({0, 2, 3, 5, 1, 4, 6})
      .reshape({b, f * hp * wp, c * kPatch * kPatch});
}

at::Tensor unpatchify(const at::Tensor& tokens, int64_t channels, int64_t frames, int64_t hp,
                      int64_t wp) {
  const int64_t b = tokens.size(0);
  return tokens.reshape({b, frames, hp, wp, channels, kPatch, kPatch})
      .permute({0, 4, 1, 2, 5, 3, 6})
      .reshape({b, channels, frames, hp * kPatch, wp * kPatch});
}

// Per-token RoPE rotations: x's pair (2i, 2i+1), read as the complex number x_2i + i x_2i+1, is
// multiplied by rotation[..., i] = e^(i angle).
struct Rope {
  at::Tensor rotation;  // [N, head_dim/2], complex64
};

at::Tensor axis_frequencies(int64_t dims, const at::TensorOptions& options) {
  return at::pow(kRopeTheta, at::arange(0, dims, 2, options) / double(dims)).reciprocal();
}

Rope make_rope(const at::Tensor& angles) { return {at::polar(at::ones_like(angles), angles)}; }

// Video stream positions: (frame, row, column) for every token of `frames` latent frames, then
// the future-delta queries on the same raster at frame index `frames`.
Rope video_rope(int64_t frames, int64_t hp, int64_t wp, int64_t head_dim,
                const at::TensorOptions& options) {
  const int64_t hw_dims = 2 * (head_dim / 6), frame_dims = head_dim - 2 * hw_dims;
  const int64_t all_frames = frames + 1;
  at::Tensor f = at::arange(all_frames, options).view({-1, 1, 1}).expand({all_frames, hp, wp});
  at::Tensor r = at::arange(hp, options).view({1, -1, 1}).expand({all_frames, hp, wp});
  at::Tensor c = at::arange(wp, options).view({1, 1, -1}).expand({all_frames, hp, wp});
  at::Tensor angles = at::cat({f.reshape({-1, 1}) * axis_frequencies(frame_dims, options),
                               r.reshape({-1, 1}) * axis_frequencies(hw_dims, options),
                               c.reshape({-1, 1}) * axis_frequencies(hw_dims, options)},
                              1);
  return make_rope(angles);
}

Rope action_rope(int64_t rows, int64_t head_dim, const at::TensorOptions& options) {
  return make_rope(at::arange(rows, options).view({-1, 1}) * axis_frequencies(head_dim, options));
}

// x [B, N, H, d]. One complex multiply (float32) rather than rotating even and odd halves apart:
// a third of the kernels, forward and backward.
at::Tensor apply_rope(const at::Tensor& x, const Rope& rope) {
  const int64_t n = x.size(1), half = x.size(3) / 2;
  at::Tensor pairs = at::view_as_complex(
      x.to(at::kFloat).contiguous().reshape({x.size(0), n, x.size(2), half, 2}));
  at::Tensor rotated = pairs * rope.rotation.view({1, n, 1, half});
  return at::view_as_real(rotated).flatten(-2).to(x.scalar_type());
}

// Sinusoidal timestep features [.., freq_dim]: cos half then sin half (Wan's order).
at::Tensor sinusoidal_embedding(const at::Tensor& timesteps, int64_t freq_dim) {
  const int64_t half = freq_dim / 2;
  at::Tensor freqs = at::exp(at::arange(half, timesteps.options().dtype(at::kFloat)) *
                             (-std::log(10000.0) / double(half)));
  at::Tensor args = timesteps.to(at::kFloat).unsqueeze(-1) * freqs;
  return at::cat({args.cos(), args.sin()}, -1);
}

at::Tensor modulation_table(int64_t rows, int64_t hidden) {
  return torch::randn({rows, hidden}) / std::sqrt(double(hidden));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Modules.

namespace detail {

// RMSNorm with a learned scale (LibTorch 1.13 has no torch::nn::RMSNorm). From LibTorch 2.4,
// at::rms_norm, which keeps the input's dtype (2.11 still runs it as separate ops on CUDA; the
// compiled step's fused kernel replaces it, models/fused_norm.h).
class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim) { weight_ = register_parameter("weight", torch::ones({dim})); }
  at::Tensor forward(const at::Tensor& x) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    return at::rms_norm(x, {x.size(-1)}, weight_, kNormEps);
#else
    at::Tensor x32 = x.to(at::kFloat);
    at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + kNormEps);
    return normed.to(x.scalar_type()) * weight_;
#endif
  }
  const at::Tensor& weight() const { return weight_; }

 private:
  at::Tensor weight_;
};
TORCH_MODULE(RMSNorm);

// Timestep -> embedding (freq_dim -> hidden MLP) and the 6-chunk AdaLN modulation shared by all
// layers of one expert; each layer adds its own learned table (Wan's design).
class TimestepEmbedderImpl : public torch::nn::Module {
 public:
  TimestepEmbedderImpl(int64_t freq_dim, int64_t hidden) : freq_dim_(freq_dim) {
    mlp_ = register_module(
        "mlp", torch::nn::Sequential(torch::nn::Linear(freq_dim, hidden), torch::nn::SiLU(),
                                     torch::nn::Linear(hidden, hidden)));
    projection_ = register_module("projection", torch::nn::Linear(hidden, 6 * hidden));
  }
  // timesteps [B, S] -> embedding [B, S, D] and modulation [B, S, 6*D]
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& timesteps, at::ScalarType dtype) {
    at::Tensor embedding =
        linear_act_linear(mlp_, sinusoidal_embedding(timesteps, freq_dim_).to(dtype),
                          [](const at::Tensor& h) { return at::silu(h); });
    return {embedding, linear(projection_, at::silu(embedding))};
  }

 private:
  int64_t freq_dim_;
  torch::nn::Sequential mlp_{nullptr};
  torch::nn::Linear projection_{nullptr};
};

// Final AdaLN (shift, scale from the timestep embedding plus a learned table) and a projection.
class OutputHeadImpl : public torch::nn::Module {
 public:
  OutputHeadImpl(int64_t hidden, int64_t out) {
    modulation_ = register_parameter("modulation", modulation_table(2, hidden));
    linear_ = register_module("linear", torch::nn::Linear(hidden, out));
  }
  // x [B, N, D], embedding [B, 1, D] (one timestep for all of x)
  at::Tensor forward(const at::Tensor& x, const at::Tensor& embedding) {
    std::vector<at::Tensor> mod = (modulation_.unsqueeze(0) + embedding).unbind(1);
    return linear(linear_, plain_layer_norm(x) * (1 + mod[1].unsqueeze(1)) + mod[0].unsqueeze(1));
  }

 private:
  at::Tensor modulation_;  // [2, D]: shift, scale
  torch::nn::Linear linear_{nullptr};
};

// What one expert contributes to the joint attention, and its modulation for the post block.
struct ExpertAttentionInput {
  at::Tensor residual;  // the stream x, to add the attention's output to (NormedAndResidual)
  at::Tensor normed;    // the modulated norm of x, the q/k/v product's input
  at::Tensor qkv;       // [B, N, 3*H*d]: the fused q, k, v product, before the q/k norms
  std::vector<at::Tensor>
      mods;  // 6 x [B, S, D]: shift/scale/gate (attention), shift/scale/gate (FFN)
};

// An expert's tokens of the joint attention's output: `projected`, its output projection already
// applied without the bias (token_parts_linear_without_bias), or else `tokens` [B, N, H*d].
struct AttentionOutput {
  at::Tensor tokens, projected;
};

// One expert's half of a MoT layer.
class ExpertBlockImpl : public torch::nn::Module {
 public:
  ExpertBlockImpl(int64_t hidden, int64_t ffn, int64_t heads, int64_t head_dim, int64_t context_dim)
      : hidden_(hidden), heads_(heads), head_dim_(head_dim) {
    const int64_t inner = heads * head_dim;
    modulation_ = register_parameter("modulation", modulation_table(6, hidden));
    q_ = register_module("q", torch::nn::Linear(hidden, inner));
    k_ = register_module("k", torch::nn::Linear(hidden, inner));
    v_ = register_module("v", torch::nn::Linear(hidden, inner));
    o_ = register_module("o", torch::nn::Linear(inner, hidden));
    q_norm_ = register_module("q_norm", RMSNorm(inner));
    k_norm_ = register_module("k_norm", RMSNorm(inner));
    cross_norm_ = register_module(
        "cross_norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(kNormEps)));
    cross_q_ = register_module("cross_q", torch::nn::Linear(hidden, inner));
    cross_k_ = register_module("cross_k", torch::nn::Linear(context_dim, inner));
    cross_v_ = register_module("cross_v", torch::nn::Linear(context_dim, inner));
    cross_o_ = register_module("cross_o", torch::nn::Linear(inner, hidden));
    cross_q_norm_ = register_module("cross_q_norm", RMSNorm(inner));
    cross_k_norm_ = register_module("cross_k_norm", RMSNorm(inner));
    ffn_in_ = register_module("ffn_in", torch::nn::Linear(hidden, ffn));
    ffn_out_ = register_module("ffn_out", torch::nn::Linear(ffn, hidden));
  }

  // x [B, N, D]; t_mod [B, S, 6*D], one row per segment of `layout`. `fused`: the modulated norm
  // through the fused kernel where it applies. The q/k/v product is qkv_product's, left to the
  // caller.
  ExpertAttentionInput pre_attention(const at::Tensor& x, const at::Tensor& t_mod,
                                     const TokenGroups& layout, bool fused) {
    ExpertAttentionInput out;
    out.mods =
        (modulation_.view({1, 1, 6, hidden_}) + t_mod.view({x.size(0), t_mod.size(1), 6, hidden_}))
            .unbind(2);
    const NormedAndResidual h = modulated_norm(x, out.mods[0], out.mods[1], layout, fused);
    out.residual = h.residual;
    out.normed = h.normed;
    return out;
  }

  // The fused q, k, v product [B, N, 3*H*d] of pre_attention's normed input, written into `rows`
  // where they are given and the bfloat16 product applies.
  at::Tensor qkv_product(const at::Tensor& normed, bool fused, const TokenRows& rows) {
    return fused_linear(normed, {q_, k_, v_}, fused, fp8_, rows);
  }

  // This expert's q, k, v heads [B, N, H, d] from its QKV product: RMSNorm and RoPE on q and k,
  // through the fused kernel where `fused` and it applies.
  JointQkv heads(const at::Tensor& qkv, const Rope& rope, bool fused) {
    const int64_t inner = heads_ * head_dim_;
    std::vector<at::Tensor> parts = qkv.split(inner, -1);
    return {normed_heads(q_norm_, parts[0], &rope, fused),
            normed_heads(k_norm_, parts[1], &rope, fused),
            parts[2].reshape({qkv.size(0), qkv.size(1), heads_, head_dim_})};
  }

  QkNormWeights qk_norm_weights() const { return {q_norm_->weight(), k_norm_->weight()}; }

  // The compiled step's products in FP8 (WorldActionModelImpl::set_fp8); null: bf16.
  void set_fp8(Fp8Linears* fp8) { fp8_ = fp8; }
  bool products_in_fp8() const { return fp8_ != nullptr; }
  const at::Tensor& output_weight() const { return o_->weight; }

  // x: the stream as pre_attention gave it (ExpertAttentionInput::residual); attended: this
  // expert's part of the joint attention's output; context [B, L, context_dim] with key mask
  // context_allowed [B, 1, 1, L]. constant_context, when defined: all L rows of the context as a
  // constant [B, L, context_dim] whose first rows carry no gradient; context then holds the last
  // rows alone, which do (constant_rows_linear).
  at::Tensor post_attention(at::Tensor x, const AttentionOutput& attended,
                            const std::vector<at::Tensor>& mods, const TokenGroups& layout,
                            const at::Tensor& context, const at::Tensor& context_allowed,
                            bool fused, const at::Tensor& constant_context = at::Tensor()) {
    // The bf16 epilogue products leave the output projections' biases to the gated residuals.
    const bool bias_in_residual = fused && fp8_ == nullptr;
    if (attended.projected.defined()) {
      x = biased_gated_residual(x, attended.projected, o_->bias, mods[2], layout);
    } else if (bias_in_residual && epilogue_linears_apply(attended.tokens)) {
      x = biased_gated_residual(x,
                                epilogue_linear_without_bias(attended.tokens, o_->weight, o_->bias),
                                o_->bias, mods[2], layout);
    } else {
      x = gated_residual(x, linear(o_, attended.tokens, fused, fp8_), mods[2], layout, fused);
    }
    const NormedAndResidual crossed = cross_layer_norm(cross_norm_, x, fused);
    const LinearResidual crossed_out = cross_attention(crossed.normed, crossed.residual, context,
                                                       context_allowed, fused, constant_context);
    const NormedAndResidual normed =
        modulated_norm(crossed_out.out, mods[3], mods[4], layout, fused, crossed_out.grad_channel);
    x = normed.residual;
    const at::Tensor& h = normed.normed;
    at::Tensor ffn;
    if (bias_in_residual && epilogue_linears_apply(h)) {
      ffn = epilogue_gelu_mlp_without_out_bias(h, ffn_in_->weight, ffn_in_->bias, ffn_out_->weight,
                                               ffn_out_->bias);
      return biased_gated_residual(x, ffn, ffn_out_->bias, mods[5], layout);
    }
    if (fused && fp8_ != nullptr) {
      ffn = fp8_gelu_mlp(h, ffn_in_->weight, ffn_in_->bias, ffn_out_->weight, ffn_out_->bias,
                         fp8_->state_for(ffn_in_->weight), fp8_->state_for(ffn_out_->weight));
    } else {
      ffn = linear(ffn_out_, at::gelu(linear(ffn_in_, h), "tanh"));
    }
    return gated_residual(x, ffn, mods[5], layout, fused);
  }

 private:
  // x [B, N, H*d] -> RMSNorm, RoPE when `rope` is given, as heads [B, N, H, d].
  at::Tensor normed_heads(RMSNorm& norm, const at::Tensor& x, const Rope* rope, bool fused) {
    const std::vector<int64_t> heads = {x.size(0), x.size(1), heads_, head_dim_};
    if (fused && fused_rms_norm_rope_applies(x, head_dim_)) {
      return fused_rms_norm_rope(x, norm->weight(), rope ? rope->rotation : at::Tensor(), head_dim_,
                                 kNormEps)
          .view(heads);
    }
    at::Tensor normed = norm->forward(x).view(heads);
    return rope ? apply_rope(normed, *rope) : normed;
  }

  // residual + the cross-attention of x (the normed stream) over the context; the compiled step's
  // bfloat16 products add the residual in the output product's epilogue, and give the sum's
  // gradient channel (LinearResidual).
  LinearResidual cross_attention(const at::Tensor& x, const at::Tensor& residual,
                                 const at::Tensor& context, const at::Tensor& context_allowed,
                                 bool fused, const at::Tensor& constant_context) {
    const int64_t b = x.size(0),
                  l = constant_context.defined() ? constant_context.size(1) : context.size(1);
    at::Tensor q = normed_heads(cross_q_norm_, linear(cross_q_, x, fused, fp8_), nullptr, fused);
    std::vector<at::Tensor> kv =
        fused_linears(context, {cross_k_, cross_v_}, fused, fp8_, constant_context);
    at::Tensor k = normed_heads(cross_k_norm_, kv[0], nullptr, fused);
    at::Tensor v = kv[1].reshape({b, l, heads_, head_dim_});
    const at::Tensor attended = attention(q, k, v, context_allowed);
    if (fused && fp8_ == nullptr && epilogue_linears_apply(attended)) {
      return epilogue_linear_residual(attended, cross_o_->weight, cross_o_->bias, residual);
    }
    return {residual + linear(cross_o_, attended, fused, fp8_), at::Tensor()};
  }

  int64_t hidden_, heads_, head_dim_;
  Fp8Linears* fp8_ = nullptr;  // owned by the model
  at::Tensor modulation_;      // [6, D]
  torch::nn::Linear q_{nullptr}, k_{nullptr}, v_{nullptr}, o_{nullptr};
  RMSNorm q_norm_{nullptr}, k_norm_{nullptr};
  torch::nn::LayerNorm cross_norm_{nullptr};
  torch::nn::Linear cross_q_{nullptr}, cross_k_{nullptr}, cross_v_{nullptr}, cross_o_{nullptr};
  RMSNorm cross_q_norm_{nullptr}, cross_k_norm_{nullptr};
  torch::nn::Linear ffn_in_{nullptr}, ffn_out_{nullptr};
};
TORCH_MODULE(ExpertBlock);

// Everything a layer reads besides the two hidden streams; the same for every layer of a step.
struct LayerInputs {
  // Differentiable (activation_checkpoint passes them through as inputs so they receive gradients).
  at::Tensor video_t_mod, action_t_mod;      // [B, S, 6*D]
  at::Tensor video_context, action_context;  // [B, L+1, video_hidden], [B, S+1, vlm_dim]
  // Constants.
  TokenGroups video_groups, action_groups;
  // The compiled step: the action context's rows as one constant ([B, S+1, vlm_dim], the proprio
  // row's values last), action_context then holding the proprio row alone, through which its
  // gradient flows (constant_rows_linear; ExpertBlockImpl::post_attention).
  at::Tensor action_constant_context;
  bool fused_norms = false;  // WorldActionModelImpl::set_fused_kernels
  Rope video_rope, action_rope;
  // bool [B, 1, N, N] and [B, 1, 1, L]; in the compiled step, additive biases [B, 1, Nq, Nk]
  // (attention_bias).
  at::Tensor joint_allowed;
  at::Tensor video_context_allowed, action_context_allowed;
};

struct LayerOutputs {
  at::Tensor video, action;          // after the last layer
  std::vector<at::Tensor> captured;  // video stream after each of MoTConfig::captured_layers()
};

class MoTLayerImpl : public torch::nn::Module {
 public:
  explicit MoTLayerImpl(const MoTConfig& c)
      : head_dim_(c.head_dim), inner_(c.num_heads * c.head_dim) {
    video_ = register_module(
        "video", ExpertBlock(c.video_hidden, c.video_ffn, c.num_heads, c.head_dim, c.video_hidden));
    action_ = register_module(
        "action", ExpertBlock(c.action_hidden, c.action_ffn, c.num_heads, c.head_dim, c.vlm_dim));
  }

  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& video, const at::Tensor& action,
                                            const LayerInputs& in) {
    ExpertAttentionInput v =
        video_->pre_attention(video, in.video_t_mod, in.video_groups, in.fused_norms);
    ExpertAttentionInput a =
        action_->pre_attention(action, in.action_t_mod, in.action_groups, in.fused_norms);
    // The compiled step's bfloat16 q/k/v products write their rows of one buffer of both experts'
    // tokens, whose v columns the joint attention then reads in place (fused_joint_qkv;
    // docs/KERNELS.md, version 45).
    at::Tensor joint_qkv;
    if (in.fused_norms && !video_->products_in_fp8() && epilogue_linears_apply(v.normed) &&
        epilogue_linears_apply(a.normed)) {
      joint_qkv = at::empty({video.size(0), video.size(1) + action.size(1), 3 * inner_},
                            v.normed.options());
    }
    v.qkv = video_->qkv_product(v.normed, in.fused_norms, {joint_qkv, 0});
    a.qkv = action_->qkv_product(a.normed, in.fused_norms, {joint_qkv, video.size(1)});
    const at::Tensor attended = joint_attention(v.qkv, a.qkv, in);
    const std::vector<int64_t> tokens = {video.size(1), action.size(1)};
    AttentionOutput video_attended, action_attended;
    if (in.fused_norms && !video_->products_in_fp8() && epilogue_linears_apply(attended)) {
      // Both output projections read their tokens of the joint output in place, their input
      // gradients written into one (docs/KERNELS.md, version 46).
      const std::vector<at::Tensor> projected = token_parts_linear_without_bias(
          attended, tokens, {video_->output_weight(), action_->output_weight()});
      video_attended.projected = projected[0];
      action_attended.projected = projected[1];
    } else {
      // The compiled step's other products take each expert's tokens as a tensor of their own
      // (split_tokens); eager keeps the reference's slices.
      const std::vector<at::Tensor> parts =
          in.fused_norms ? split_tokens(attended, tokens)
                         : std::vector<at::Tensor>{attended.narrow(1, 0, tokens[0]),
                                                   attended.narrow(1, tokens[0], tokens[1])};
      video_attended.tokens = parts[0];
      action_attended.tokens = parts[1];
    }
    at::Tensor video_out =
        video_->post_attention(v.residual, video_attended, v.mods, in.video_groups,
                               in.video_context, in.video_context_allowed, in.fused_norms);
    at::Tensor action_out = action_->post_attention(
        a.residual, action_attended, a.mods, in.action_groups, in.action_context,
        in.action_context_allowed, in.fused_norms, in.action_constant_context);
    return {video_out, action_out};
  }

  void set_fp8(Fp8Linears* fp8) {
    video_->set_fp8(fp8);
    action_->set_fp8(fp8);
  }

  // Attention over the video tokens then the action tokens, each expert with its own q/k norms
  // and RoPE. The compiled step builds the joint q, k, v in one op (fused_joint_qkv) instead of
  // concatenating the experts' heads.
  at::Tensor joint_attention(const at::Tensor& video_qkv, const at::Tensor& action_qkv,
                             const LayerInputs& in) {
    if (in.fused_norms && fused_joint_qkv_applies(video_qkv, action_qkv, head_dim_)) {
      const std::vector<int64_t> heads = {video_qkv.size(0), video_qkv.size(1) + action_qkv.size(1),
                                          -1, head_dim_};
      const JointQkv joint = fused_joint_qkv(video_qkv, action_qkv, video_->qk_norm_weights(),
                                             action_->qk_norm_weights(), in.video_rope.rotation,
                                             in.action_rope.rotation, head_dim_, kNormEps);
      return attention(joint.q.view(heads), joint.k.view(heads), joint.v.view(heads),
                       in.joint_allowed);
    }
    const JointQkv v = video_->heads(video_qkv, in.video_rope, in.fused_norms),
                   a = action_->heads(action_qkv, in.action_rope, in.fused_norms);
    return attention(at::cat({v.q, a.q}, 1), at::cat({v.k, a.k}, 1), at::cat({v.v, a.v}, 1),
                     in.joint_allowed);
  }

 private:
  int64_t head_dim_, inner_;  // inner_: heads x head_dim, each of q, k, v's width
  ExpertBlock video_{nullptr}, action_{nullptr};
};

}  // namespace detail

// SDPA converts a bool mask into an additive bias on every call, forward and backward (cuDNN's
// kernels take only a bias), so the compiled step builds it once per step. Rows are padded to a
// multiple of 16 elements, the alignment the fused kernels want (SDPA would otherwise pad a copy
// on every call). A mask with one row for all queries (the contexts' key padding) stays one row,
// expanded with stride 0: cuDNN's backward reads a bias of [B, 1, Nq, Nk] in full, which
// scripts/attention-bench.py timed at 1.4x the expanded row's cost on the cross-attentions' shapes
// (docs/KERNELS.md, version 15).
at::Tensor attention_bias(const at::Tensor& allowed, int64_t queries, at::ScalarType dtype) {
  const int64_t keys = allowed.size(3), padded = (keys + 15) / 16 * 16;
  const int64_t rows = allowed.size(2) == 1 ? 1 : queries;
  const std::vector<int64_t> sizes = {allowed.size(0), 1, rows, keys};
  at::Tensor bias = at::zeros({allowed.size(0), 1, rows, padded}, allowed.options().dtype(dtype))
                        .narrow(3, 0, keys);
  bias.masked_fill_(allowed.expand(sizes).logical_not(), -std::numeric_limits<double>::infinity());
  return bias.expand({allowed.size(0), 1, queries, keys});
}

namespace {

// The joint self-attention mask, true = may attend, over [video stream, action tokens], where the
// video stream is `frames` latent frames of `hw` tokens (anchor, recent, current, future...) and
// then `hw` future-delta queries, treated as one more frame.
// - Video stream, first-frame causal: a token of frame f sees frames <= max(f, current), so the
//   condition frames (anchor, recent, current) see each other and are visible to every token, and
//   the queries see every frame. A padded recent frame is hidden from everyone.
// - Video tokens never see action tokens: the video prediction must not depend on the actions.
// - Action tokens see the whole video stream and every non-padded action row, in both directions:
//   all rows share one noise level and are denoised together (as pi0's action expert does), so no
//   row order is implied; padded rows are hidden so that their content cannot leak into the loss.
at::Tensor joint_attention_mask(int64_t frames, int64_t hw, const at::Tensor& recent_is_pad,
                                const at::Tensor& action_is_pad) {
  const int64_t batch = action_is_pad.size(0), rows = action_is_pad.size(1);
  const int64_t video_tokens = (frames + 1) * hw;
  at::TensorOptions long_options = action_is_pad.options().dtype(at::kLong);
  at::Tensor frame_of_token = at::arange(frames + 1, long_options).repeat_interleave(hw);  // [Nv]
  at::Tensor visible_up_to = frame_of_token.clamp_min(kConditionFrames - 1);
  at::Tensor video_video = frame_of_token.view({1, -1}) <= visible_up_to.view({-1, 1});

  at::Tensor recent_visible = recent_is_pad.reshape({batch, 1}).logical_not().expand({batch, hw});
  at::Tensor video_key_ok = at::ones({batch, video_tokens}, action_is_pad.options());
  video_key_ok = at::cat(
      {video_key_ok.narrow(1, 0, kRecentFrame * hw), recent_visible,
       video_key_ok.narrow(1, (kRecentFrame + 1) * hw, video_tokens - (kRecentFrame + 1) * hw)},
      1);
  at::Tensor action_key_ok = action_is_pad.logical_not();

  at::Tensor video_rows = at::cat({video_video.unsqueeze(0).logical_and(video_key_ok.unsqueeze(1)),
                                   at::zeros({batch, video_tokens, rows}, action_is_pad.options())},
                                  2);
  at::Tensor action_rows = at::cat({video_key_ok.unsqueeze(1).expand({batch, rows, video_tokens}),
                                    action_key_ok.unsqueeze(1).expand({batch, rows, rows})},
                                   2);
  return at::cat({video_rows, action_rows}, 1).unsqueeze(1);
}

// 1 - cosine similarity of student and teacher tokens [B, N, D], averaged over each sample's
// tokens, then over the samples whose sigma [B] is at most max_sigma: a masked mean, 0 when none
// qualify. The gate is a multiplicative mask (no boolean indexing, no host read), so shapes stay
// static and the term is capturable in a CUDA graph.
at::Tensor semantic_alignment_loss(const at::Tensor& student, const at::Tensor& teacher,
                                   const at::Tensor& sigma, double max_sigma) {
  at::Tensor per_sample =
      (1 - at::cosine_similarity(student.to(at::kFloat), teacher.to(at::kFloat), -1)).mean(1);
  at::Tensor qualifies = sigma.to(at::kFloat).le(max_sigma).to(at::kFloat);
  return (per_sample * qualifies).sum() / qualifies.sum().clamp_min(1.0);
}

// Context key mask plus the always-valid proprio token appended at the end: [B, 1, 1, L+1].
at::Tensor context_allowed(const at::Tensor& mask) {
  at::Tensor proprio = at::ones({mask.size(0), 1}, mask.options());
  return at::cat({mask.to(at::kBool), proprio.to(at::kBool)}, 1).view({mask.size(0), 1, 1, -1});
}

void require(bool ok, const std::string& message) {
  if (!ok) throw Error("WorldActionModel: " + message);
}

std::string sizes_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

// The latent raster in (1,2,2) patches: rows and columns of patches per frame.
struct PatchRaster {
  int64_t height, width;
};

// Checks a batch's shapes against the model config before loss() uses them.
PatchRaster check_batch_shapes(const TrainBatch& batch, const MoTConfig& c) {
  const at::Tensor& latents = batch.video_latents;
  require(latents.dim() == 5 && latents.size(1) == c.latent_channels &&
              latents.size(2) == 1 + c.future_latent_frames,
          "video_latents must be [B, " + std::to_string(c.latent_channels) + ", " +
              std::to_string(1 + c.future_latent_frames) +
              ", h, w] (latent_channels, 1 + future_latent_frames), got " + sizes_of(latents));
  const int64_t h = latents.size(3), w = latents.size(4);
  require(h % kPatch == 0 && w % kPatch == 0,
          "latent h and w must be even for the (1,2,2) patch, got " + sizes_of(latents));
  const int64_t hp = h / kPatch, wp = w / kPatch, hw = hp * wp;
  require(c.future_delta_tokens == hw,
          "future_delta_tokens = " + std::to_string(c.future_delta_tokens) +
              " must equal the latent raster's tokens per frame (" + std::to_string(hp) + "x" +
              std::to_string(wp) + " = " + std::to_string(hw) + " for " + std::to_string(h) + "x" +
              std::to_string(w) + " latents); set future_delta_tokens in the model config");
  require(batch.action.dim() == 3 && batch.action.size(2) == c.action_dim,
          "action must be [B, rows, " + std::to_string(c.action_dim) + "], got " +
              sizes_of(batch.action));
  require(batch.proprio.dim() == 3 && batch.proprio.size(2) == c.proprio_dim,
          "proprio must be [B, rows, " + std::to_string(c.proprio_dim) + "], got " +
              sizes_of(batch.proprio));
  require(batch.context.dim() == 3 && batch.context.size(2) == c.text_dim,
          "context must be [B, L, " + std::to_string(c.text_dim) + "] (text_dim), got " +
              sizes_of(batch.context));
  require(batch.vlm_context.dim() == 3 && batch.vlm_context.size(2) == c.vlm_dim,
          "vlm_context must be [B, S, " + std::to_string(c.vlm_dim) + "] (vlm_dim), got " +
              sizes_of(batch.vlm_context));
  return {hp, wp};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MoTConfig.

void MoTConfig::check(ParamChecker& c) const {
  c.require(video_shift > 0.0, "video_shift", "must be > 0, got " + std::to_string(video_shift));
  c.require(action_shift > 0.0, "action_shift", "must be > 0, got " + std::to_string(action_shift));
  // 3-D RoPE splits head_dim into (frame, h, w) parts of whole rotation pairs: h and w get
  // 2*(head_dim/6) dims each, the frame axis the rest (Wan's split).
  c.require(
      head_dim % 2 == 0 && head_dim >= 6, "head_dim",
      "must be even and >= 6 for 3-D RoPE over (frame, h, w), got " + std::to_string(head_dim));
  c.require(freq_dim % 2 == 0, "freq_dim",
            "must be even (cos and sin halves), got " + std::to_string(freq_dim));
  // The attention width num_heads*head_dim is independent of the hidden widths (the reference's
  // action expert is 1024 wide with 24x128 = 3072 attention), but must not overflow int64 sizes.
  c.require(num_heads <= (int64_t{1} << 20) / head_dim, "num_heads",
            "num_heads*head_dim = " + std::to_string(num_heads) + "*" + std::to_string(head_dim) +
                " is beyond any model this code can build");
  if (semantic_alignment) {
    c.require(semantic_teacher_layer < num_layers, "semantic_teacher_layer",
              "must name one of the " + std::to_string(num_layers) + " layers (0-based), got " +
                  std::to_string(semantic_teacher_layer));
    // The teacher is the deeper layer: shallower tokens are pulled towards a later, more
    // semantic representation.
    c.require(semantic_student_layer < semantic_teacher_layer, "semantic_student_layer",
              "must be below semantic_teacher_layer (" + std::to_string(semantic_teacher_layer) +
                  "), got " + std::to_string(semantic_student_layer));
  }
}

MoTConfig MoTConfig::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw Error("model config: expected a JSON object, got " + j.dump());
  Diagnostics diagnostics;
  MoTConfig config = parse_params<MoTConfig>(j, "", diagnostics);
  throw_config_problems(diagnostics);
  return config;
}

MoTConfig MoTConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the model config");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(path + ": " + e.what());
  }
  try {
    return from_json(j);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

nlohmann::json MoTConfig::to_json() const {
  nlohmann::json j = params_to_json(*this);
  j.erase("notes");
  return j;
}

int64_t MoTConfig::parameter_count() const {
  auto linear = [](int64_t in, int64_t out) { return in * out + out; };
  const int64_t inner = num_heads * head_dim;
  const int64_t patch_features = latent_channels * kPatch * kPatch;
  auto expert_layer = [&](int64_t hidden, int64_t ffn, int64_t context_dim) {
    return 6 * hidden                                           // modulation table
           + 3 * linear(hidden, inner) + linear(inner, hidden)  // q, k, v, o
           + 2 * inner                                          // q/k RMSNorm
           + 2 * hidden                                         // cross-attention LayerNorm
           + linear(hidden, inner) + 2 * linear(context_dim, inner) + linear(inner, hidden) +
           2 * inner  // cross q, k, v, o, norms
           + linear(hidden, ffn) + linear(ffn, hidden);
  };
  auto timestep_embedder = [&](int64_t hidden) {
    return linear(freq_dim, hidden) + linear(hidden, hidden) + linear(hidden, 6 * hidden);
  };
  auto head = [&](int64_t hidden, int64_t out) { return 2 * hidden + linear(hidden, out); };
  return linear(patch_features, video_hidden) + future_delta_tokens * video_hidden +
         linear(action_dim, action_hidden) + linear(proprio_dim, text_dim) +
         linear(proprio_dim, vlm_dim) + linear(text_dim, video_hidden) +
         linear(video_hidden, video_hidden) + timestep_embedder(video_hidden) +
         timestep_embedder(action_hidden) +
         num_layers * (expert_layer(video_hidden, video_ffn, video_hidden) +
                       expert_layer(action_hidden, action_ffn, vlm_dim)) +
         head(video_hidden, patch_features) +
         head(video_hidden, future_latent_frames * patch_features) +
         head(action_hidden, action_dim);
}

std::vector<int64_t> MoTConfig::captured_layers() const {
  if (!semantic_alignment) return {};
  return {semantic_student_layer, semantic_teacher_layer};
}

std::vector<int64_t> activation_checkpoint_group_starts(
    int64_t num_layers, int64_t group_size, const std::vector<int64_t>& captured_layers) {
  // INFERRED: the regular grid stays and the splits are added to it ("extra boundaries"); the
  // reference's own numbers (9 and 21 for groups of 3) fall on the grid either way.
  std::set<int64_t> starts = {0};
  if (group_size > 0) {
    for (int64_t start = group_size; start < num_layers; start += group_size) starts.insert(start);
  }
  for (int64_t layer : captured_layers) {
    if (layer + 1 < num_layers) starts.insert(layer + 1);
  }
  return {starts.begin(), starts.end()};
}

// ---------------------------------------------------------------------------------------------
// Flow noise.

FlowNoise sample_flow_noise(const TrainBatch& batch, const MoTConfig& config, at::Generator gen) {
  const int64_t b = batch.video_latents.size(0);
  at::TensorOptions sigma_options = batch.video_latents.options().dtype(at::kFloat);
  // Shifted sigma: s*u / (1 + (s-1)*u), u ~ U(0,1); s > 1 pushes samples towards high noise.
  auto shifted = [&](double shift) {
    at::Tensor u = at::rand({b}, gen, sigma_options);
    return shift * u / (1 + (shift - 1) * u);
  };
  FlowNoise noise;
  noise.video_noise = at::randn(batch.video_latents.sizes(), gen, batch.video_latents.options());
  noise.video_sigma = shifted(config.video_shift);
  noise.action_noise = at::randn(batch.action.sizes(), gen, batch.action.options());
  noise.action_sigma = shifted(config.action_shift);
  return noise;
}

// ---------------------------------------------------------------------------------------------
// WorldActionModel.

WorldActionModelImpl::WorldActionModelImpl(const MoTConfig& config) : config_(config) {
  check_consistency(config_);
  const MoTConfig& c = config_;
  const int64_t patch_features = c.latent_channels * kPatch * kPatch;
  patch_embed_ = register_module("patch_embed", torch::nn::Linear(patch_features, c.video_hidden));
  delta_queries_ = register_parameter("delta_queries",
                                      torch::randn({c.future_delta_tokens, c.video_hidden}) * 0.02);
  action_embed_ = register_module("action_embed", torch::nn::Linear(c.action_dim, c.action_hidden));
  proprio_to_text_ =
      register_module("proprio_to_text", torch::nn::Linear(c.proprio_dim, c.text_dim));
  proprio_to_vlm_ = register_module("proprio_to_vlm", torch::nn::Linear(c.proprio_dim, c.vlm_dim));
  text_embedding_ = register_module(
      "text_embedding", torch::nn::Sequential(torch::nn::Linear(c.text_dim, c.video_hidden),
                                              torch::nn::Functional([](const at::Tensor& x) {
                                                return at::gelu(x, "tanh");
                                              }),
                                              torch::nn::Linear(c.video_hidden, c.video_hidden)));
  video_time_ = register_module(
      "video_time", std::make_shared<detail::TimestepEmbedderImpl>(c.freq_dim, c.video_hidden));
  action_time_ = register_module(
      "action_time", std::make_shared<detail::TimestepEmbedderImpl>(c.freq_dim, c.action_hidden));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    layers_->push_back(std::make_shared<detail::MoTLayerImpl>(c));
  }
  video_head_ = register_module(
      "video_head", std::make_shared<detail::OutputHeadImpl>(c.video_hidden, patch_features));
  delta_head_ =
      register_module("delta_head", std::make_shared<detail::OutputHeadImpl>(
                                        c.video_hidden, c.future_latent_frames * patch_features));
  action_head_ = register_module(
      "action_head", std::make_shared<detail::OutputHeadImpl>(c.action_hidden, c.action_dim));
}

void WorldActionModelImpl::set_fp8(const at::Tensor& steps_done) {
  fp8_ = steps_done.defined() ? std::make_shared<Fp8Linears>(steps_done) : nullptr;
  for (const auto& layer : *layers_) layer->as<detail::MoTLayerImpl>()->set_fp8(fp8_.get());
}

int64_t WorldActionModelImpl::parameter_count() const {
  int64_t count = 0;
  for (const at::Tensor& p : parameters()) count += p.numel();
  return count;
}

std::vector<int64_t> WorldActionModelImpl::checkpoint_group_layers() const {
  const std::vector<int64_t> starts = activation_checkpoint_group_starts(
      config_.num_layers, config_.activation_checkpoint_group, config_.captured_layers());
  std::vector<int64_t> layers;
  for (size_t g = 0; g < starts.size(); ++g) {
    layers.push_back((g + 1 < starts.size() ? starts[g + 1] : config_.num_layers) - starts[g]);
  }
  return layers;
}

detail::LayerOutputs WorldActionModelImpl::run_layers(at::Tensor video_tokens,
                                                      at::Tensor action_tokens,
                                                      const detail::LayerInputs& inputs) {
  const int64_t num_layers = config_.num_layers;
  const bool recompute = config_.activation_checkpoint_group > 0 && at::GradMode::is_enabled();
  const std::vector<int64_t> captured = config_.captured_layers();
  const std::vector<int64_t> starts = activation_checkpoint_group_starts(
      num_layers, recompute ? config_.activation_checkpoint_group : 0, captured);
  detail::LayerOutputs outputs;
  outputs.captured.resize(captured.size());
  for (size_t g = 0; g < starts.size(); ++g) {
    const int64_t start = starts[g];
    const int64_t end = g + 1 < starts.size() ? starts[g + 1] : num_layers;
    // The closure outlives this call when recomputed (backward recomputes through it), so it
    // holds its own copy of the constants; the differentiable tensors arrive as `in`: video,
    // action, then LayerInputs' differentiable members in declaration order.
    detail::LayerInputs constants = inputs;
    constants.video_t_mod = constants.action_t_mod = at::Tensor();
    constants.video_context = constants.action_context = at::Tensor();
    auto run_group = [this, constants, start, end](const torch::autograd::variable_list& in) {
      detail::LayerInputs group_inputs = constants;
      group_inputs.video_t_mod = in[2];
      group_inputs.action_t_mod = in[3];
      group_inputs.video_context = in[4];
      group_inputs.action_context = in[5];
      at::Tensor video = in[0], action = in[1];
      for (int64_t i = start; i < end; ++i) {
        std::tie(video, action) =
            layers_[i]->as<detail::MoTLayerImpl>()->forward(video, action, group_inputs);
      }
      return torch::autograd::variable_list{video, action};
    };
    torch::autograd::variable_list in = {video_tokens,         action_tokens,
                                         inputs.video_t_mod,   inputs.action_t_mod,
                                         inputs.video_context, inputs.action_context};
    const bool recompute_group =
        recompute && (recomputed_groups_ < 0 || static_cast<int64_t>(g) < recomputed_groups_);
    torch::autograd::variable_list out =
        recompute_group ? activation_checkpoint(run_group, in) : run_group(in);
    video_tokens = out[0];
    action_tokens = out[1];
    for (size_t k = 0; k < captured.size(); ++k) {
      if (captured[k] == end - 1) outputs.captured[k] = video_tokens;
    }
  }
  outputs.video = video_tokens;
  outputs.action = action_tokens;
  return outputs;
}

detail::LayerInputs WorldActionModelImpl::layer_inputs(const TrainBatch& batch,
                                                       const at::Tensor& video_t_mod,
                                                       const at::Tensor& action_t_mod, int64_t hp,
                                                       int64_t wp, int64_t video_tokens) {
  const MoTConfig& c = config_;
  const at::Tensor& latents = batch.video_latents;
  const at::ScalarType dtype = patch_embed_->weight.scalar_type();
  const int64_t frames = kConditionFrames + c.future_latent_frames, hw = hp * wp;
  const int64_t rows = batch.action.size(1);
  at::Tensor proprio_row = batch.proprio.narrow(1, 0, 1).to(dtype);
  detail::LayerInputs inputs;
  inputs.video_t_mod = video_t_mod;
  inputs.action_t_mod = action_t_mod;
  inputs.video_context = linear_act_linear(
      text_embedding_, at::cat({batch.context.to(dtype), linear(proprio_to_text_, proprio_row)}, 1),
      [](const at::Tensor& h) { return at::gelu(h, "tanh"); });
  inputs.action_context =
      at::cat({batch.vlm_context.to(dtype), linear(proprio_to_vlm_, proprio_row)}, 1);
  at::TensorOptions float_options = latents.options().dtype(at::kFloat);
  // Video: one group per latent frame plus the delta queries; the condition frames are clean.
  inputs.video_groups.groups = frames + 1;
  inputs.video_groups.segment_of_group =
      at::arange(frames + 1, float_options.dtype(at::kLong)).ge(kConditionFrames).to(at::kLong);
  inputs.video_rope = video_rope(frames, hp, wp, c.head_dim, float_options);
  inputs.action_rope = action_rope(rows, c.head_dim, float_options);
  inputs.joint_allowed = joint_attention_mask(frames, hw, batch.recent_is_pad.to(at::kBool),
                                              batch.action_is_pad.to(at::kBool));
  inputs.video_context_allowed = context_allowed(batch.context_mask);
  inputs.fused_norms = fused_kernels_;
  inputs.action_context_allowed = context_allowed(batch.vlm_mask);
  if (fused_kernels_ && latents.is_cuda()) {
    // The compiled step: the masks as biases of the attention's dtype, built once per step.
    at::ScalarType attention_dtype = dtype;
#if WAM_WITH_CUDA
    if (at::autocast::is_autocast_enabled(at::kCUDA)) {
      attention_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    }
#endif
    inputs.joint_allowed =
        attention_bias(inputs.joint_allowed, inputs.joint_allowed.size(2), attention_dtype);
    inputs.video_context_allowed =
        attention_bias(inputs.video_context_allowed, video_tokens, attention_dtype);
    inputs.action_context_allowed =
        attention_bias(inputs.action_context_allowed, rows, attention_dtype);
    // The VLM rows are constants: projected without an input gradient, and cast once.
    inputs.action_context = linear(proprio_to_vlm_, proprio_row);
    inputs.action_constant_context = at::cat(
        {batch.vlm_context.to(attention_dtype), inputs.action_context.detach().to(attention_dtype)},
        1);
  }
  return inputs;
}

LossTerms WorldActionModelImpl::loss(const TrainBatch& batch, const FlowNoise& noise) {
  const MoTConfig& c = config_;
  const at::Tensor& latents = batch.video_latents;
  const PatchRaster raster = check_batch_shapes(batch, c);
  const int64_t b = latents.size(0), hp = raster.height, wp = raster.width, hw = hp * wp;

  const at::ScalarType dtype = patch_embed_->weight.scalar_type();
  const int64_t future = c.future_latent_frames, frames = kConditionFrames + future;
  auto per_sample = [b](const at::Tensor& sigma) {
    return sigma.to(at::kFloat).view({b, 1, 1, 1, 1});
  };

  // Video: the future frames are noised; anchor, recent (zeroed when padded) and current stay
  // clean.
  at::Tensor x0 = latents.to(at::kFloat);
  at::Tensor current = x0.narrow(2, 0, 1), future_x0 = x0.narrow(2, 1, future);
  at::Tensor future_noise = noise.video_noise.to(at::kFloat).narrow(2, 1, future);
  at::Tensor video_sigma = per_sample(noise.video_sigma);
  at::Tensor future_xt = (1 - video_sigma) * future_x0 + video_sigma * future_noise;
  at::Tensor video_target = future_noise - future_x0;
  at::Tensor recent_keep = batch.recent_is_pad.reshape({b, 1, 1, 1, 1}).logical_not();
  at::Tensor recent = batch.recent_latents.to(at::kFloat) * recent_keep;
  at::Tensor video_frames =
      at::cat({batch.anchor_latents.to(at::kFloat), recent, current, future_xt}, 2);
  at::Tensor video_tokens = at::cat({linear(patch_embed_, patchify(video_frames).to(dtype)),
                                     delta_queries_.unsqueeze(0).expand({b, hw, c.video_hidden})},
                                    1);

  // Action: the whole chunk is noised; padded dims are zeroed so their content cannot leak in.
  const int64_t rows = batch.action.size(1);
  at::Tensor dim_keep = batch.action_dim_is_pad.logical_not().view({b, 1, c.action_dim});
  at::Tensor action_x0 = batch.action.to(at::kFloat) * dim_keep;
  at::Tensor action_sigma = noise.action_sigma.to(at::kFloat).view({b, 1, 1});
  at::Tensor action_noise = noise.action_noise.to(at::kFloat);
  at::Tensor action_xt = (1 - action_sigma) * action_x0 + action_sigma * action_noise;
  at::Tensor action_target = action_noise - action_x0;
  at::Tensor action_tokens = linear(action_embed_, action_xt.to(dtype));

  // Timesteps: the video stream has a clean segment (timestep 0) and a noised one (future frames
  // and delta queries); the action chunk has one.
  at::Tensor video_timesteps = at::stack({at::zeros_like(noise.video_sigma, at::kFloat),
                                          noise.video_sigma.to(at::kFloat) * kNumTrainTimesteps},
                                         1);
  auto [video_embedding, video_t_mod] = video_time_->forward(video_timesteps, dtype);
  auto [action_embedding, action_t_mod] = action_time_->forward(
      noise.action_sigma.to(at::kFloat).view({b, 1}) * kNumTrainTimesteps, dtype);

  const detail::LayerInputs inputs =
      layer_inputs(batch, video_t_mod, action_t_mod, hp, wp, video_tokens.size(1));
  const detail::LayerOutputs layers = run_layers(video_tokens, action_tokens, inputs);
  const at::Tensor& video_out = layers.video;
  const at::Tensor& action_out = layers.action;

  at::Tensor noised_embedding = video_embedding.narrow(1, 1, 1);
  at::Tensor video_velocity =
      unpatchify(video_head_->forward(video_out.narrow(1, kConditionFrames * hw, future * hw),
                                      noised_embedding),
                 c.latent_channels, future, hp, wp);
  // Each delta query predicts its raster position's patch for every future frame.
  at::Tensor delta_tokens =
      delta_head_->forward(video_out.narrow(1, frames * hw, hw), noised_embedding)
          .view({b, hw, future, -1})
          .transpose(1, 2)
          .reshape({b, future * hw, -1});
  at::Tensor delta = unpatchify(delta_tokens, c.latent_channels, future, hp, wp);
  at::Tensor action_velocity = action_head_->forward(action_out, action_embedding);

  LossTerms terms;
  terms.video = at::mse_loss(video_velocity.to(at::kFloat), video_target);
  terms.future_delta = at::mse_loss(delta.to(at::kFloat), future_x0 - current);
  at::Tensor action_weight =
      batch.action_is_pad.logical_not().view({b, rows, 1}).logical_and(dim_keep).to(at::kFloat);
  at::Tensor action_error = (action_velocity.to(at::kFloat) - action_target).pow(2);
  terms.action = (action_error * action_weight).sum() / action_weight.sum().clamp_min(1.0);
  if (c.semantic_alignment) {
    terms.semantic_student = layers.captured[0].narrow(1, frames * hw, hw);
    // Detached: the reference names this side the teacher, i.e. a target; letting the term's
    // gradient into the deeper layer would also pull the teacher towards the student.
    terms.semantic_teacher = layers.captured[1].narrow(1, (frames - 1) * hw, hw).detach();
    terms.semantic = semantic_alignment_loss(terms.semantic_student, terms.semantic_teacher,
                                             noise.video_sigma, c.semantic_max_sigma);
  } else {
    terms.semantic = at::zeros({}, latents.options().dtype(at::kFloat));
  }
  terms.total = c.lambda_video * terms.video + c.lambda_action * terms.action +
                c.lambda_future_delta * terms.future_delta + c.lambda_semantic * terms.semantic;
  return terms;
}

}  // namespace wam::models
