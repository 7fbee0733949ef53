// epilogue_linear, epilogue_gelu_mlp and linear_param_grads against the ATen compositions they
// replace in the compiled step: values and every gradient, on float32 (CPU: the ATen path) and,
// where the build has CUDA, on bfloat16 under autocast through cuBLASLt's epilogues at the base
// preset's widths.
#include "models/epilogue_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "models/bf16_weights.h"
#include "wam/error.h"

#if WAM_WITH_CUDA
#include <ATen/autocast_mode.h>
#endif
#if WAM_FUSED_KERNELS
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/epilogue_gemm.h"
#include "kernels/gelu_backward.h"
#endif

namespace wam {
namespace {

struct Layer {
  at::Tensor weight, bias;  // float32 leaves requiring gradients, as the MoT's parameters
};

Layer make_layer(int64_t in, int64_t out, const at::TensorOptions& options) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(in));
  return {(at::randn({out, in}, options.dtype(at::kFloat)) * scale).requires_grad_(),
          (at::randn({out}, options.dtype(at::kFloat)) * 0.1).requires_grad_()};
}

void clear_grads(std::initializer_list<at::Tensor> leaves) {
  for (at::Tensor leaf : leaves) leaf.mutable_grad() = at::Tensor();
}

// The output and the gradients of x and of each layer's weight and bias.
struct Result {
  at::Tensor out;
  std::vector<at::Tensor> grads;
};

template <class Forward>
Result run(const at::Tensor& x, const std::vector<Layer>& layers, const at::Tensor& grad,
           Forward forward) {
  clear_grads({x});
  for (const Layer& layer : layers) clear_grads({layer.weight, layer.bias});
  at::Tensor out = forward();
  out.backward(grad.to(out.scalar_type()));
  Result result{out.detach(), {x.grad()}};
  for (const Layer& layer : layers) {
    result.grads.push_back(layer.weight.grad());
    result.grads.push_back(layer.bias.grad());
  }
  return result;
}

void expect_close(const Result& got, const Result& want, double tolerance) {
  ASSERT_EQ(got.grads.size(), want.grads.size());
  std::vector<std::pair<at::Tensor, at::Tensor>> pairs = {{got.out, want.out}};
  for (size_t i = 0; i < got.grads.size(); ++i) pairs.push_back({got.grads[i], want.grads[i]});
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [a, b] = pairs[i];
    const std::string name = i == 0 ? "out" : "grad " + std::to_string(i - 1);
    ASSERT_TRUE(a.defined()) << name;
    EXPECT_EQ(a.sizes(), b.sizes()) << name;
    EXPECT_EQ(a.scalar_type(), b.scalar_type()) << name;
    const double error = (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
    const double scale = b.to(at::kFloat).abs().max().item<double>();
    EXPECT_LE(error, tolerance * scale) << name << ": max error " << error << " of " << scale;
  }
}

Result linear_composition(const at::Tensor& x, const Layer& layer, const at::Tensor& grad) {
  return run(x, {layer}, grad, [&] { return at::linear(x, layer.weight, layer.bias); });
}

Result linear_fused(const at::Tensor& x, const Layer& layer, const at::Tensor& grad) {
  return run(x, {layer}, grad,
             [&] { return models::epilogue_linear(x, layer.weight, layer.bias); });
}

Result mlp_composition(const at::Tensor& x, const Layer& in, const Layer& out,
                       const at::Tensor& grad) {
  return run(x, {in, out}, grad, [&] {
    return at::linear(at::gelu(at::linear(x, in.weight, in.bias), "tanh"), out.weight, out.bias);
  });
}

Result mlp_fused(const at::Tensor& x, const Layer& in, const Layer& out, const at::Tensor& grad) {
  return run(x, {in, out}, grad, [&] {
    return models::epilogue_gelu_mlp(x, in.weight, in.bias, out.weight, out.bias);
  });
}

// residual + linear, the residual a leaf too: its gradient after the layer's.
template <class Forward>
Result residual_run(const at::Tensor& x, const Layer& layer, const at::Tensor& residual,
                    const at::Tensor& grad, Forward forward) {
  clear_grads({residual});
  Result result = run(x, {layer}, grad, forward);
  result.grads.push_back(residual.grad());
  return result;
}

Result residual_composition(const at::Tensor& x, const Layer& layer, const at::Tensor& residual,
                            const at::Tensor& grad) {
  return residual_run(x, layer, residual, grad,
                      [&] { return residual + at::linear(x, layer.weight, layer.bias); });
}

Result residual_fused(const at::Tensor& x, const Layer& layer, const at::Tensor& residual,
                      const at::Tensor& grad) {
  return residual_run(x, layer, residual, grad, [&] {
    return models::epilogue_linear_residual(x, layer.weight, layer.bias, residual).out;
  });
}

TEST(EpilogueLinear, EqualsLinearWithItsGradients) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({3, 5, 8}).requires_grad_();
  const Layer layer = make_layer(8, 6, at::TensorOptions());
  const at::Tensor grad = at::randn({3, 5, 6});
  const Result got = linear_fused(x, layer, grad);
  expect_close(got, linear_composition(x, layer, grad), 1e-6);
  EXPECT_EQ(got.out.sizes(), (std::vector<int64_t>{3, 5, 6}));
  EXPECT_EQ(got.grads[0].sizes(), (std::vector<int64_t>{3, 5, 8}));
}

TEST(EpilogueLinearResidual, EqualsResidualPlusLinearWithItsGradients) {
  at::manual_seed(5);
  const at::Tensor x = at::randn({3, 5, 8}).requires_grad_();
  const Layer layer = make_layer(8, 6, at::TensorOptions());
  const at::Tensor residual = at::randn({3, 5, 6}).requires_grad_();
  const at::Tensor grad = at::randn({3, 5, 6});
  const Result got = residual_fused(x, layer, residual, grad);
  expect_close(got, residual_composition(x, layer, residual, grad), 1e-6);
  EXPECT_EQ(got.out.sizes(), (std::vector<int64_t>{3, 5, 6}));
  EXPECT_TRUE(at::equal(got.grads.back(), grad));  // the residual's: the output's own
}

// x in bfloat16, the residual in float32: the output float32 with a channel for its gradient in
// bfloat16. A gradient given to the channel is the one the parameters' and x's gradients come
// from (the same bits as the output's own cast where it is that cast; none where it is zero);
// without one, the output's gradient cast, as before.
TEST(EpilogueLinearResidual, ProductGradientsComeFromTheChannelWhereItHasAGradient) {
  at::manual_seed(6);
  const at::Tensor x = at::randn({2, 4, 8}).to(at::kBFloat16).requires_grad_();
  const Layer layer = make_layer(8, 6, at::TensorOptions());
  const at::Tensor residual = at::randn({2, 4, 6}).requires_grad_();
  const at::Tensor grad = at::randn({2, 4, 6});
  const auto grads_after = [&](const at::Tensor& channel_grad) {
    clear_grads({x, layer.weight, layer.bias, residual});
    const models::LinearResidual got =
        models::epilogue_linear_residual(x, layer.weight, layer.bias, residual);
    EXPECT_EQ(got.out.scalar_type(), at::kFloat);
    EXPECT_EQ(got.grad_channel.scalar_type(), at::kBFloat16);
    EXPECT_EQ(got.grad_channel.sizes(), got.out.sizes());
    EXPECT_EQ(got.grad_channel.strides(), (std::vector<int64_t>{0, 0, 0}));
    if (channel_grad.defined()) {
      torch::autograd::backward({got.out, got.grad_channel}, {grad, channel_grad});
    } else {
      got.out.backward(grad);
    }
    return std::vector<at::Tensor>{x.grad(), layer.weight.grad(), layer.bias.grad(),
                                   residual.grad()};
  };
  const std::vector<at::Tensor> cast = grads_after(at::Tensor()),
                                through_channel = grads_after(grad.to(at::kBFloat16)),
                                zero_channel = grads_after(at::zeros_like(grad, at::kBFloat16));
  for (size_t i = 0; i < cast.size(); ++i) {
    EXPECT_TRUE(at::equal(through_channel[i], cast[i])) << "gradient " << i;
  }
  EXPECT_EQ(zero_channel[0].abs().max().item<float>(), 0.f);  // x's
  EXPECT_EQ(zero_channel[1].abs().max().item<float>(), 0.f);  // the weight's
  EXPECT_TRUE(at::equal(zero_channel[3], grad));              // the residual's: the output's own
  EXPECT_GT(cast[1].abs().max().item<float>(), 0.f);
}

TEST(EpilogueLinearResidual, HasNoChannelWhereXHasTheOutputsDtype) {
  const Layer layer = make_layer(8, 6, at::TensorOptions());
  const models::LinearResidual got = models::epilogue_linear_residual(
      at::randn({2, 8}), layer.weight, layer.bias, at::randn({2, 6}));
  EXPECT_EQ(got.out.sizes(), (std::vector<int64_t>{2, 6}));
  EXPECT_FALSE(got.grad_channel.defined());
}

TEST(EpilogueGeluMlp, EqualsLinearGeluLinearWithItsGradients) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({2, 7, 8}).requires_grad_();
  const Layer in = make_layer(8, 20, at::TensorOptions()), out = make_layer(20, 8, {});
  const at::Tensor grad = at::randn({2, 7, 8});
  const Result got = mlp_fused(x, in, out, grad);
  expect_close(got, mlp_composition(x, in, out, grad), 1e-5);
  EXPECT_EQ(got.grads[1].sizes(), (std::vector<int64_t>{20, 8}));
  EXPECT_EQ(got.grads[2].sizes(), (std::vector<int64_t>{20}));
}

TEST(EpilogueGeluMlp, NaNInOneRowsGradientStaysInThatRowOfTheInputGradient) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 4, 8}).requires_grad_();
  const Layer in = make_layer(8, 16, at::TensorOptions()), out = make_layer(16, 8, {});
  at::Tensor grad = at::randn({2, 4, 8});
  grad[1][2][3] = std::numeric_limits<float>::quiet_NaN();
  const Result got = mlp_fused(x, in, out, grad);
  EXPECT_TRUE(got.grads[0][1][2].isnan().all().item<bool>());
  EXPECT_FALSE(got.grads[0][0].isnan().any().item<bool>());
  EXPECT_FALSE(got.grads[0][1][1].isnan().any().item<bool>());
  EXPECT_TRUE(got.grads[4][3].isnan().item<bool>());  // the output bias's column 3
  EXPECT_FALSE(got.grads[4][2].isnan().item<bool>());
}

// The last layer's bias gradient taken out of `result`, which must have none: the op left that
// bias to the op its output goes to.
Result without_last_bias_grad(Result result) {
  EXPECT_FALSE(result.grads.back().defined()) << "a gradient for a bias the op left out";
  result.grads.pop_back();
  return result;
}

Result linear_without_bias(const at::Tensor& x, const Layer& layer, const at::Tensor& grad) {
  return without_last_bias_grad(run(x, {layer}, grad, [&] {
    return models::epilogue_linear_without_bias(x, layer.weight, layer.bias);
  }));
}

Result linear_without_bias_composition(const at::Tensor& x, const Layer& layer,
                                       const at::Tensor& grad) {
  return without_last_bias_grad(run(x, {layer}, grad, [&] { return at::linear(x, layer.weight); }));
}

Result mlp_without_out_bias(const at::Tensor& x, const Layer& in, const Layer& out,
                            const at::Tensor& grad) {
  return without_last_bias_grad(run(x, {in, out}, grad, [&] {
    return models::epilogue_gelu_mlp_without_out_bias(x, in.weight, in.bias, out.weight, out.bias);
  }));
}

Result mlp_without_out_bias_composition(const at::Tensor& x, const Layer& in, const Layer& out,
                                        const at::Tensor& grad) {
  return without_last_bias_grad(run(x, {in, out}, grad, [&] {
    return at::linear(at::gelu(at::linear(x, in.weight, in.bias), "tanh"), out.weight);
  }));
}

TEST(EpilogueLinear, WithoutBiasIsTheProductAloneAndGivesTheBiasNoGradient) {
  at::manual_seed(11);
  const at::Tensor x = at::randn({3, 5, 8}).requires_grad_();
  const Layer in = make_layer(8, 6, {}), out = make_layer(6, 8, {});
  const at::Tensor grad = at::randn({3, 5, 6}), mlp_grad = at::randn({3, 5, 8});
  const Result got = linear_without_bias(x, in, grad);
  expect_close(got, linear_without_bias_composition(x, in, grad), 1e-6);
  EXPECT_EQ(got.grads.size(), 2u);  // x's and the weight's
  expect_close(mlp_without_out_bias(x, in, out, mlp_grad),
               mlp_without_out_bias_composition(x, in, out, mlp_grad), 1e-5);
}

Result joint_composition(const at::Tensor& x, const std::vector<Layer>& layers,
                         const at::Tensor& grad) {
  return run(x, layers, grad, [&] {
    std::vector<at::Tensor> weights, biases;
    for (const Layer& layer : layers) {
      weights.push_back(layer.weight);
      biases.push_back(layer.bias);
    }
    return at::linear(x, at::cat(weights), at::cat(biases));
  });
}

Result joint_fused(const at::Tensor& x, const std::vector<Layer>& layers, const at::Tensor& grad) {
  return run(x, layers, grad, [&] {
    std::vector<at::Tensor> weights, biases;
    for (const Layer& layer : layers) {
      weights.push_back(layer.weight);
      biases.push_back(layer.bias);
    }
    return models::epilogue_joint_linear(x, weights, biases);
  });
}

TEST(EpilogueJointLinear, EqualsLinearOfTheConcatenationWithItsGradients) {
  at::manual_seed(7);
  const at::Tensor x = at::randn({2, 5, 8}).requires_grad_();
  const std::vector<Layer> layers = {make_layer(8, 6, {}), make_layer(8, 4, {}),
                                     make_layer(8, 6, {})};
  const at::Tensor grad = at::randn({2, 5, 16});
  const Result got = joint_fused(x, layers, grad);
  expect_close(got, joint_composition(x, layers, grad), 1e-6);
  EXPECT_EQ(got.out.sizes(), (std::vector<int64_t>{2, 5, 16}));
  EXPECT_EQ(got.grads[3].sizes(), (std::vector<int64_t>{4, 8}));  // the second layer's weight
  EXPECT_EQ(got.grads[6].sizes(), (std::vector<int64_t>{6}));     // the third layer's bias
}

// Without the bfloat16 CUDA product (here float32 on the CPU) the output is a tensor of its own, as
// epilogue_joint_linear's, and the buffer is left as it was.
TEST(EpilogueJointLinear, IntoRowsIsTheOwnOutputWhereTheProductCannotWriteThere) {
  at::manual_seed(7);
  const at::Tensor x = at::randn({2, 5, 8}).requires_grad_();
  const std::vector<Layer> layers = {make_layer(8, 6, {}), make_layer(8, 6, {})};
  const at::Tensor grad = at::randn({2, 5, 12});
  const at::Tensor buffer = at::zeros({2, 9, 12});
  const Result got = run(x, layers, grad, [&] {
    return models::epilogue_joint_linear_into(x, {layers[0].weight, layers[1].weight},
                                              {layers[0].bias, layers[1].bias}, {buffer, 4});
  });
  expect_close(got, joint_composition(x, layers, grad), 1e-6);
  EXPECT_TRUE(got.out.is_contiguous());
  EXPECT_FALSE(got.out.storage().is_alias_of(buffer.storage()));
  EXPECT_EQ(buffer.abs().sum().item<float>(), 0.0f);
}

// Each part's outputs, then the gradients of x and of each part's weight, from
// sum(out_e * grads[e]) for the parts of x along its tokens.
template <class Forward>
std::vector<at::Tensor> parts_run(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                                  const std::vector<at::Tensor>& grads, Forward forward) {
  clear_grads({x});
  for (const at::Tensor& weight : weights) clear_grads({weight});
  const std::vector<at::Tensor> outs = forward();
  at::Tensor loss = at::zeros({}, grads[0].options());
  for (size_t e = 0; e < outs.size(); ++e) {
    loss = loss + (outs[e] * grads[e].to(outs[e].scalar_type())).to(at::kFloat).sum();
  }
  loss.backward();
  std::vector<at::Tensor> results;
  for (const at::Tensor& out : outs) results.push_back(out.detach());
  results.push_back(x.grad());
  for (const at::Tensor& weight : weights) results.push_back(weight.grad());
  return results;
}

std::vector<at::Tensor> parts_composition(const at::Tensor& x, const std::vector<int64_t>& tokens,
                                          const std::vector<at::Tensor>& weights,
                                          const std::vector<at::Tensor>& grads) {
  return parts_run(x, weights, grads, [&] {
    std::vector<at::Tensor> outs;
    int64_t first = 0;
    for (size_t e = 0; e < tokens.size(); ++e) {
      outs.push_back(at::linear(x.narrow(1, first, tokens[e]), weights[e]));
      first += tokens[e];
    }
    return outs;
  });
}

std::vector<at::Tensor> parts_fused(const at::Tensor& x, const std::vector<int64_t>& tokens,
                                    const std::vector<at::Tensor>& weights,
                                    const std::vector<at::Tensor>& grads) {
  return parts_run(x, weights, grads,
                   [&] { return models::token_parts_linear_without_bias(x, tokens, weights); });
}

void expect_all_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                      double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].defined()) << i;
    EXPECT_EQ(got[i].sizes(), want[i].sizes()) << i;
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << i;
    const double error =
        (got[i].to(at::kFloat) - want[i].to(at::kFloat)).abs().max().item<double>();
    const double scale = want[i].to(at::kFloat).abs().max().item<double>();
    EXPECT_LE(error, tolerance * scale) << i << ": max error " << error << " of " << scale;
  }
}

// Two experts' attention output products over their tokens of one joint output: each the part's
// product without bias, x's gradient both parts' input gradients in their rows, the weights'
// gradients each part's own; token counts that do not fit x refused with what to fix.
TEST(EpilogueLinear, TokenPartsAreEachPartsProductWithoutBias) {
  at::manual_seed(12);
  const at::Tensor x = at::randn({2, 7, 8}).requires_grad_();
  const std::vector<at::Tensor> weights = {at::randn({6, 8}).requires_grad_(),
                                           at::randn({4, 8}).requires_grad_()};
  const std::vector<int64_t> tokens = {5, 2};
  const std::vector<at::Tensor> grads = {at::randn({2, 5, 6}), at::randn({2, 2, 4})};
  const std::vector<at::Tensor> got = parts_fused(x, tokens, weights, grads);
  expect_all_close(got, parts_composition(x, tokens, weights, grads), 1e-6);
  EXPECT_EQ(got[0].sizes(), (std::vector<int64_t>{2, 5, 6}));
  EXPECT_EQ(got[1].sizes(), (std::vector<int64_t>{2, 2, 4}));
  EXPECT_EQ(got[2].sizes(), x.sizes());
  const auto error_of = [&](const std::vector<int64_t>& counts, at::TensorList layer_weights) {
    try {
      models::token_parts_linear_without_bias(x, counts, layer_weights);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of({5, 3}, weights),
            "token_parts_linear_without_bias: the token counts sum to 8, not x's 7 tokens");
  EXPECT_EQ(error_of({7}, weights),
            "token_parts_linear_without_bias: 1 token counts but 2 weights; give one weight a "
            "part");
}

// Copies kept one after another in one buffer are read in place; apart, they are concatenated;
// either way the values are the float32 parameters' concatenation cast, refreshed after a change.
TEST(ConcatenatedBf16Weights, AreAViewOfAdjacentCopiesElseTheirConcatenation) {
  at::manual_seed(8);
  std::vector<at::Tensor> weights = {at::randn({3, 4}), at::randn({2, 4}), at::randn({3, 4})};
  const at::Tensor buffer = at::empty({32}, at::kBFloat16);
  int64_t offset = 0;
  for (const at::Tensor& weight : weights) {
    models::keep_bf16_copy(weight, buffer.narrow(0, offset, weight.numel()).view(weight.sizes()));
    offset += weight.numel();
  }
  const at::Tensor joint = models::concatenated_bf16_weights(weights);
  EXPECT_EQ(joint.data_ptr(), buffer.data_ptr());
  EXPECT_EQ(joint.sizes(), (std::vector<int64_t>{8, 4}));
  EXPECT_TRUE(at::equal(joint, at::cat(weights).to(at::kBFloat16)));
  {
    at::NoGradGuard no_grad;
    weights[1].add_(1);  // moves the version counter: the copy is filled again
  }
  EXPECT_TRUE(
      at::equal(models::concatenated_bf16_weights(weights), at::cat(weights).to(at::kBFloat16)));
  models::keep_bf16_copy(weights[1], at::empty({2, 4}, at::kBFloat16));
  const at::Tensor apart = models::concatenated_bf16_weights(weights);
  EXPECT_NE(apart.data_ptr(), buffer.data_ptr());
  EXPECT_TRUE(at::equal(apart, at::cat(weights).to(at::kBFloat16)));
  for (const at::Tensor& weight : weights) models::drop_bf16_copy(weight);

  // Biases, one dimension: the same.
  const std::vector<at::Tensor> biases = {at::randn({4}), at::randn({8})};
  const at::Tensor bias_buffer = at::empty({12}, at::kBFloat16);
  models::keep_bf16_copy(biases[0], bias_buffer.narrow(0, 0, 4));
  models::keep_bf16_copy(biases[1], bias_buffer.narrow(0, 4, 8));
  const at::Tensor joint_bias = models::concatenated_bf16_weights(biases);
  EXPECT_EQ(joint_bias.data_ptr(), bias_buffer.data_ptr());
  EXPECT_EQ(joint_bias.sizes(), (std::vector<int64_t>{12}));
  EXPECT_TRUE(at::equal(joint_bias, at::cat(biases).to(at::kBFloat16)));
  for (const at::Tensor& bias : biases) models::drop_bf16_copy(bias);
}

TEST(LinearParamGrads, AreTheProductOfGradAndInputAndTheColumnSums) {
  const at::Tensor grad = at::arange(6, at::kFloat).view({3, 2});  // [[0, 1], [2, 3], [4, 5]]
  const at::Tensor x = at::ones({3, 4});
  const models::LinearGrads grads = models::linear_param_grads(grad, x, at::kFloat, at::kDouble);
  EXPECT_TRUE(at::equal(grads.weight, at::tensor({6.f, 9.f}).view({2, 1}).expand({2, 4})));
  EXPECT_EQ(grads.bias.scalar_type(), at::kDouble);
  EXPECT_TRUE(at::equal(grads.bias, at::tensor({6.0, 9.0}, at::kDouble)));
}

#if WAM_WITH_CUDA
class EpilogueLinearCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
  // As the compiled step runs them: bfloat16 activations under autocast, float32 parameters.
  static void autocast(bool on) {
    at::autocast::set_autocast_enabled(at::kCUDA, on);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    if (!on) at::autocast::clear_cache();
  }
};

// The video expert's widths (configs/model/base.json: hidden 1536, FFN 6144), 2 samples of 300
// tokens, and a width cuBLASLt's epilogues cannot take (the ATen path then).
TEST_F(EpilogueLinearCuda, MatchesTheCompositionUnderBf16Autocast) {
  const at::TensorOptions cuda(at::kCUDA);
  for (const auto& [hidden, ffn] : {std::pair<int64_t, int64_t>{1536, 6144}, {36, 52}}) {
    at::manual_seed(4);
    const at::Tensor x = at::randn({2, 300, hidden}, cuda).to(at::kBFloat16).requires_grad_();
    const Layer in = make_layer(hidden, ffn, cuda), out = make_layer(ffn, hidden, cuda);
    const at::Tensor grad = at::randn({2, 300, hidden}, cuda);
    const at::Tensor linear_grad = at::randn({2, 300, ffn}, cuda);
    autocast(true);
    const Result want_linear = linear_composition(x, in, linear_grad),
                 got_linear = linear_fused(x, in, linear_grad);
    const Result want_mlp = mlp_composition(x, in, out, grad),
                 got_mlp = mlp_fused(x, in, out, grad);
    const Result want_bare = linear_without_bias_composition(x, in, linear_grad),
                 got_bare = linear_without_bias(x, in, linear_grad);
    const Result want_bare_mlp = mlp_without_out_bias_composition(x, in, out, grad),
                 got_bare_mlp = mlp_without_out_bias(x, in, out, grad);
    autocast(false);
    expect_close(got_linear, want_linear, 2e-2);
    expect_close(got_mlp, want_mlp, 2e-2);
    expect_close(got_bare, want_bare, 2e-2);
    expect_close(got_bare_mlp, want_bare_mlp, 2e-2);
    // Parameter gradients in the parameters' dtype, as autocast's casts return them.
    EXPECT_EQ(got_mlp.grads[1].scalar_type(), at::kFloat);
    EXPECT_EQ(got_mlp.grads[2].scalar_type(), at::kFloat);
  }
}

// The cross-attention's output product with the float32 stream added in its epilogue, at the
// video expert's width: the gradients as the composition's under autocast, and the output closer
// to the exact sum than the composition's, whose product output is rounded to bfloat16 before the
// add (so the epilogue, not the fallback, ran).
TEST_F(EpilogueLinearCuda, ResidualAddedInTheProductMatchesTheCompositionUnderBf16Autocast) {
  const at::TensorOptions cuda(at::kCUDA);
  at::manual_seed(8);
  const int64_t hidden = 1536;
  const at::Tensor x = at::randn({2, 300, hidden}, cuda).to(at::kBFloat16).requires_grad_();
  const Layer layer = make_layer(hidden, hidden, cuda);
  const at::Tensor residual = at::randn({2, 300, hidden}, cuda).requires_grad_();
  const at::Tensor grad = at::randn({2, 300, hidden}, cuda);
  autocast(true);
  const Result want = residual_composition(x, layer, residual, grad),
               got = residual_fused(x, layer, residual, grad);
  autocast(false);
  expect_close(got, want, 2e-2);
  EXPECT_EQ(got.out.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(got.grads.back(), grad));
  const at::Tensor exact = residual.detach().to(at::kDouble) +
                           at::linear(x.detach().to(at::kDouble),
                                      layer.weight.detach().to(at::kBFloat16).to(at::kDouble),
                                      layer.bias.detach().to(at::kDouble));
  const double scale = exact.abs().max().item<double>();
  EXPECT_LE((got.out.to(at::kDouble) - exact).abs().max().item<double>(), 1e-4 * scale);
  EXPECT_GE((want.out.to(at::kDouble) - exact).abs().max().item<double>(), 5e-4 * scale);
}

// q, k, v of the video expert (hidden 1536) as the compiled step runs them: bfloat16 under
// autocast, the weights' copies kept one after another in one buffer, as the optimizer keeps them.
TEST_F(EpilogueLinearCuda, JointLinearReadsTheKeptCopiesAndMatchesTheComposition) {
  const at::TensorOptions cuda(at::kCUDA);
  at::manual_seed(9);
  const int64_t hidden = 1536;
  const at::Tensor x = at::randn({2, 300, hidden}, cuda).to(at::kBFloat16).requires_grad_();
  const std::vector<Layer> layers = {make_layer(hidden, hidden, cuda),
                                     make_layer(hidden, hidden, cuda),
                                     make_layer(hidden, hidden, cuda)};
  const at::Tensor buffer = at::empty({3 * hidden * hidden}, cuda.dtype(at::kBFloat16));
  for (size_t i = 0; i < layers.size(); ++i) {
    models::keep_bf16_copy(
        layers[i].weight,
        buffer.narrow(0, static_cast<int64_t>(i) * hidden * hidden, hidden * hidden)
            .view({hidden, hidden}));
  }
  const at::Tensor grad = at::randn({2, 300, 3 * hidden}, cuda);
  autocast(true);
  const Result want = joint_composition(x, layers, grad), got = joint_fused(x, layers, grad);
  autocast(false);
  for (const Layer& layer : layers) models::drop_bf16_copy(layer.weight);
  expect_close(got, want, 2e-2);
  EXPECT_EQ(got.grads[1].scalar_type(), at::kFloat);
}
#endif

#if WAM_FUSED_KERNELS
// The video and action experts' q/k/v products (hidden 1536 and 512, q/k/v 3 x 1536 wide) written
// into one buffer of both experts' tokens under autocast: every row of the buffer written (it
// starts as NaN), each output a tensor over its rows, values and every gradient as the
// composition's.
TEST_F(EpilogueLinearCuda, JointLinearIntoRowsWritesTheBuffersRowsAndMatchesTheComposition) {
  const at::TensorOptions cuda(at::kCUDA);
  at::manual_seed(10);
  const int64_t inner = 1536, hiddens[2] = {1536, 512}, tokens[2] = {300, 32};
  const at::Tensor buffer =
      at::full({2, tokens[0] + tokens[1], 3 * inner}, std::numeric_limits<float>::quiet_NaN(),
               cuda.dtype(at::kBFloat16));
  std::vector<Result> got, want;
  for (int e = 0; e < 2; ++e) {
    const at::Tensor x =
        at::randn({2, tokens[e], hiddens[e]}, cuda).to(at::kBFloat16).requires_grad_();
    const std::vector<Layer> layers = {make_layer(hiddens[e], inner, cuda),
                                       make_layer(hiddens[e], inner, cuda),
                                       make_layer(hiddens[e], inner, cuda)};
    const at::Tensor grad = at::randn({2, tokens[e], 3 * inner}, cuda);
    autocast(true);
    want.push_back(joint_composition(x, layers, grad));
    got.push_back(run(x, layers, grad, [&] {
      return models::epilogue_joint_linear_into(
          x, {layers[0].weight, layers[1].weight, layers[2].weight},
          {layers[0].bias, layers[1].bias, layers[2].bias}, {buffer, e == 0 ? 0 : tokens[0]});
    }));
    autocast(false);
    expect_close(got.back(), want.back(), 2e-2);
  }
  EXPECT_EQ(got[0].out.data_ptr(), buffer.data_ptr());
  EXPECT_EQ(got[1].out.data_ptr(), buffer.narrow(1, tokens[0], tokens[1]).data_ptr());
  EXPECT_EQ(got[1].out.strides(), buffer.strides());
  EXPECT_FALSE(buffer.isnan().any().item<bool>());
  EXPECT_TRUE(at::equal(buffer, at::cat({got[0].out, got[1].out}, 1)));
}

// The base preset's attention output products (16 heads of 96 = 1536 in; the video expert's 1536
// out, the action expert's 512) over 300 and 32 tokens of one joint output under autocast: values
// and gradients as each part's composition, the strided batched products taking both shapes.
TEST_F(EpilogueLinearCuda, TokenPartsMatchEachPartsProductUnderBf16Autocast) {
  const at::TensorOptions cuda(at::kCUDA);
  at::manual_seed(13);
  const std::vector<int64_t> tokens = {300, 32};
  const at::Tensor x = at::randn({2, 332, 1536}, cuda).to(at::kBFloat16).requires_grad_();
  const std::vector<at::Tensor> weights = {(at::randn({1536, 1536}, cuda) / 40).requires_grad_(),
                                           (at::randn({512, 1536}, cuda) / 40).requires_grad_()};
  const std::vector<at::Tensor> grads = {at::randn({2, 300, 1536}, cuda),
                                         at::randn({2, 32, 512}, cuda)};
  autocast(true);
  const std::vector<at::Tensor> want = parts_composition(x, tokens, weights, grads),
                                got = parts_fused(x, tokens, weights, grads);
  autocast(false);
  expect_all_close(got, want, 2e-2);
  EXPECT_EQ(got[3].scalar_type(), at::kFloat);  // the weights' gradients in their dtype
  for (size_t e = 0; e < tokens.size(); ++e) {
    const at::Tensor weight = weights[e].detach().to(at::kBFloat16);
    const at::Tensor part = x.detach().narrow(1, e == 0 ? 0 : tokens[0], tokens[e]);
    at::Tensor out = at::empty({2, tokens[e], weight.size(0)}, part.options());
    const at::Tensor workspace = at::empty(
        {static_cast<int64_t>(kernels::kEpilogueGemmWorkspaceBytes)}, cuda.dtype(at::kByte));
    ASSERT_TRUE(kernels::linear_row_groups(part.data_ptr(), {2, part.stride(0), part.stride(1)},
                                           weight.data_ptr(), kernels::WeightLayout::kOutIn,
                                           nullptr, {2 * tokens[e], 1536, weight.size(0)},
                                           out.data_ptr(), {2, out.stride(0), out.stride(1)},
                                           workspace.data_ptr(), at::cuda::getCurrentCUDAStream()))
        << "part " << e;
    expect_all_close({out}, {at::linear(part, weight)}, 1e-2);
  }
}

// The epilogue products run (do not fall back) at the base preset's widths, and equal ATen's.
TEST_F(EpilogueLinearCuda, CublasLtTakesTheBasePresetsShapes) {
  const at::TensorOptions bf16 = at::TensorOptions(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor workspace = at::empty(
      {static_cast<int64_t>(kernels::kEpilogueGemmWorkspaceBytes)}, bf16.dtype(at::kByte));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{1536, 4608},
                                {1536, 6144},
                                {6144, 1536},
                                {512, 2048},
                                {2048, 512},
                                {2048, 3072}}) {
    at::manual_seed(6);
    const kernels::LinearShape shape{4800, in, out};
    const at::Tensor x = at::randn({shape.rows, in}, bf16);
    const at::Tensor grad = at::randn({shape.rows, out}, bf16);
    const at::Tensor weight = at::randn({out, in}, bf16) / std::sqrt(static_cast<double>(in));
    const at::Tensor bias = at::randn({out}, bf16);

    at::Tensor grad_weight = at::empty({out, in}, bf16.dtype(at::kFloat));
    at::Tensor grad_bias = at::empty({out}, bf16.dtype(at::kFloat));
    ASSERT_TRUE(kernels::linear_weight_grad_with_bias_grad(
        grad.data_ptr(), x.data_ptr(), shape, grad_weight.data_ptr(), grad_bias.data_ptr(),
        kernels::Precision::kFloat32, workspace.data_ptr(), stream))
        << in << " -> " << out;
    const at::Tensor want_weight = grad.t().to(at::kFloat).mm(x.to(at::kFloat));
    EXPECT_LE((grad_weight - want_weight).abs().max().item<double>(),
              1e-2 * want_weight.abs().max().item<double>());
    EXPECT_TRUE(at::allclose(grad_bias, grad.to(at::kFloat).sum(0), 1e-3, 1e-2));

    at::Tensor pre = at::empty({shape.rows, out}, bf16), activated = at::empty_like(pre);
    ASSERT_TRUE(kernels::linear_gelu_forward(x.data_ptr(), weight.data_ptr(), bias.data_ptr(),
                                             shape, activated.data_ptr(), pre.data_ptr(),
                                             workspace.data_ptr(), stream));
    const at::Tensor want_pre = at::linear(x, weight, bias);
    EXPECT_LE((pre - want_pre).abs().max().item<float>(), 0.05f);
    EXPECT_LE((activated - at::gelu(pre, "tanh")).abs().max().item<float>(), 0.05f);

    // Without a bias gradient: the weight's alone, the same product.
    at::Tensor weight_only = at::empty({out, in}, bf16.dtype(at::kFloat));
    ASSERT_TRUE(kernels::linear_weight_grad_with_bias_grad(
        grad.data_ptr(), x.data_ptr(), shape, weight_only.data_ptr(), nullptr,
        kernels::Precision::kFloat32, workspace.data_ptr(), stream));
    EXPECT_LE((weight_only - want_weight).abs().max().item<double>(),
              1e-2 * want_weight.abs().max().item<double>());
  }
}

// The bias gradient's column sums, the weight-gradient product's alternative to BGRADB (version 23
// of docs/KERNELS.md), against ATen's sum: the base preset's shapes, partial blocks of rows and of
// columns, float32 and bfloat16 out; a NaN stays in its column; the same bits on a second run; a
// width that is not a multiple of 8 refused.
TEST_F(EpilogueLinearCuda, ColumnSumsEqualAtensSums) {
  const at::TensorOptions bf16 = at::TensorOptions(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor workspace = at::empty(
      {static_cast<int64_t>(kernels::kEpilogueGemmWorkspaceBytes)}, bf16.dtype(at::kByte));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for (const auto& [rows, width] : {std::pair<int64_t, int64_t>{9216, 1536},
                                    {9216, 4608},
                                    {16400, 1024},
                                    {1, 8},
                                    {33, 2056},
                                    {4800, 2048}}) {
    at::manual_seed(13);
    const at::Tensor grad = at::randn({rows, width}, bf16);
    const at::Tensor want = grad.to(at::kFloat).sum(0);
    at::Tensor got = at::empty({width}, bf16.dtype(at::kFloat));
    ASSERT_TRUE(kernels::column_sums(grad.data_ptr(), rows, width, got.data_ptr(),
                                     kernels::Precision::kFloat32, workspace.data_ptr(), stream))
        << rows << " x " << width;
    EXPECT_TRUE(at::allclose(got, want, 1e-4, 1e-3)) << rows << " x " << width;
    at::Tensor again = at::empty_like(got);
    ASSERT_TRUE(kernels::column_sums(grad.data_ptr(), rows, width, again.data_ptr(),
                                     kernels::Precision::kFloat32, workspace.data_ptr(), stream));
    EXPECT_TRUE(at::equal(again, got)) << rows << " x " << width;
    at::Tensor got_bf16 = at::empty({width}, bf16);
    ASSERT_TRUE(kernels::column_sums(grad.data_ptr(), rows, width, got_bf16.data_ptr(),
                                     kernels::Precision::kBFloat16, workspace.data_ptr(), stream));
    EXPECT_TRUE(at::equal(got_bf16, got.to(at::kBFloat16))) << rows << " x " << width;
  }
  at::Tensor grad = at::ones({100, 16}, bf16);
  grad.index_put_({70, 5}, std::numeric_limits<float>::quiet_NaN());
  at::Tensor sums = at::empty({16}, bf16.dtype(at::kFloat));
  ASSERT_TRUE(kernels::column_sums(grad.data_ptr(), 100, 16, sums.data_ptr(),
                                   kernels::Precision::kFloat32, workspace.data_ptr(), stream));
  EXPECT_TRUE(std::isnan(sums[5].item<float>()));
  EXPECT_EQ(sums.isnan().sum().item<int64_t>(), 1);
  EXPECT_FLOAT_EQ(sums[4].item<float>(), 100.f);
  EXPECT_FALSE(kernels::column_sums(grad.data_ptr(), 100, 12, sums.data_ptr(),
                                    kernels::Precision::kFloat32, workspace.data_ptr(), stream));
}

// A product first met inside a CUDA graph capture takes cuBLASLt's first choice there (timing
// the candidates would break the capture), replays with the right values, and is timed at its
// next call outside a capture, again with the right values (version 22 of docs/KERNELS.md).
TEST_F(EpilogueLinearCuda, AProductFirstMetInACaptureReplaysAndIsTimedAfter) {
  const at::TensorOptions bf16 = at::TensorOptions(at::kCUDA).dtype(at::kBFloat16);
  const kernels::LinearShape shape{1000, 1536, 1536};  // a row count no other test uses
  at::manual_seed(12);
  const at::Tensor x = at::randn({shape.rows, shape.in}, bf16);
  const at::Tensor grad = at::randn({shape.rows, shape.out}, bf16);
  const at::Tensor want_weight = grad.t().to(at::kFloat).mm(x.to(at::kFloat));
  const at::Tensor want_bias = grad.to(at::kFloat).sum(0);
  const at::Tensor workspace = at::empty(
      {static_cast<int64_t>(kernels::kEpilogueGemmWorkspaceBytes)}, bf16.dtype(at::kByte));
  at::Tensor grad_weight = at::zeros({shape.out, shape.in}, bf16.dtype(at::kFloat));
  at::Tensor grad_bias = at::zeros({shape.out}, bf16.dtype(at::kFloat));
  const auto product = [&] {
    return kernels::linear_weight_grad_with_bias_grad(
        grad.data_ptr(), x.data_ptr(), shape, grad_weight.data_ptr(), grad_bias.data_ptr(),
        kernels::Precision::kFloat32, workspace.data_ptr(), at::cuda::getCurrentCUDAStream());
  };
  const auto expect_right = [&](const std::string& when) {
    EXPECT_LE((grad_weight - want_weight).abs().max().item<double>(),
              1e-2 * want_weight.abs().max().item<double>())
        << when;
    EXPECT_TRUE(at::allclose(grad_bias, want_bias, 1e-3, 1e-2)) << when;
  };
  at::cuda::CUDAGraph graph;
  bool captured = false;
  {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
    graph.capture_begin();
    captured = product();
    graph.capture_end();
  }
  ASSERT_TRUE(captured);
  graph.replay();
  expect_right("replayed");
  grad_weight.zero_();
  grad_bias.zero_();
  ASSERT_TRUE(product());
  expect_right("timed after the capture");
}

// GELU's derivative with its column sums in one pass (version 16 of docs/KERNELS.md) against
// ATen's gelu_backward and a column sum: the base preset's FFN width and widths that leave a
// partial block of columns or of rows.
TEST_F(EpilogueLinearCuda, GeluBackwardKernelEqualsAtensWithTheColumnSums) {
  const at::TensorOptions bf16 = at::TensorOptions(at::kCUDA).dtype(at::kBFloat16);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for (const auto& [rows, width] :
       {std::pair<int64_t, int64_t>{600, 6144}, {64, 8}, {65, 2056}, {1, 16}, {130, 4104}}) {
    at::manual_seed(11);
    const at::Tensor grad = at::randn({rows, width}, bf16);
    const at::Tensor pre = at::randn({rows, width}, bf16) * 3;
    at::Tensor got = at::empty_like(pre);
    at::Tensor partials =
        at::empty({kernels::gelu_backward_blocks(rows), width}, bf16.dtype(at::kFloat));
    EXPECT_EQ(partials.size(0), (rows + 63) / 64);
    kernels::gelu_backward_with_column_sums(grad.data_ptr(), pre.data_ptr(), rows, width,
                                            got.data_ptr(), partials.data_ptr<float>(), stream);
    const at::Tensor want = at::gelu_backward(grad, pre, "tanh");
    EXPECT_LE((got.to(at::kFloat) - want.to(at::kFloat)).abs().max().item<double>(),
              1e-2 * want.abs().max().item<double>())
        << rows << " x " << width;
    EXPECT_TRUE(at::allclose(partials.sum(0), got.to(at::kFloat).sum(0), 1e-4, 1e-3))
        << rows << " x " << width;
  }
  // A NaN stays in its element and its column's sum.
  at::Tensor grad = at::ones({100, 16}, bf16);
  grad.index_put_({70, 5}, std::numeric_limits<float>::quiet_NaN());
  const at::Tensor pre = at::zeros({100, 16}, bf16);
  at::Tensor got = at::empty_like(pre);
  at::Tensor partials = at::empty({2, 16}, bf16.dtype(at::kFloat));
  kernels::gelu_backward_with_column_sums(grad.data_ptr(), pre.data_ptr(), 100, 16, got.data_ptr(),
                                          partials.data_ptr<float>(), stream);
  const at::Tensor nan = got.isnan();
  EXPECT_EQ(nan.sum().item<int64_t>(), 1);
  EXPECT_TRUE(nan[70][5].item<bool>());
  const at::Tensor sums = partials.sum(0);
  EXPECT_TRUE(std::isnan(sums[5].item<float>()));
  // Elsewhere: gelu'(0) = 0.5 for every row of a column.
  EXPECT_FLOAT_EQ(sums[4].item<float>(), 50.f);
  EXPECT_FALSE(kernels::gelu_backward_supports(100, 12));
}
#endif

}  // namespace
}  // namespace wam
