// constant_rows_linear against the composition it replaces in the compiled step: the constant
// rows and x projected apart and concatenated. Values and every gradient, on float32 (CPU) and,
// where the build has CUDA, on bfloat16 under autocast as the compiled step runs it.
#include "models/constant_rows_linear.h"

#include <gtest/gtest.h>

#include <limits>

#if WAM_WITH_CUDA
#include <ATen/autocast_mode.h>
#endif

#include "testing/expect_error.h"

namespace wam {
namespace {

constexpr int64_t kBatch = 3, kConstantRows = 5, kXRows = 2, kIn = 8, kOut = 6;

struct Inputs {
  at::Tensor constant, x, weight, bias, grad;  // x, weight, bias: leaves requiring gradients
};

Inputs make_inputs(const at::TensorOptions& options, uint64_t seed) {
  at::manual_seed(seed);
  const at::TensorOptions floats = options.dtype(at::kFloat);
  return {at::randn({kBatch, kConstantRows, kIn}, floats),
          at::randn({kBatch, kXRows, kIn}, floats).requires_grad_(),
          at::randn({kOut, kIn}, floats).requires_grad_(),
          at::randn({kOut}, floats).requires_grad_(),
          at::randn({kBatch, kConstantRows + kXRows, kOut}, floats)};
}

struct Result {
  at::Tensor out, grad_x, grad_weight, grad_bias;
};

// Runs `project` and backpropagates the inputs' upstream gradient through it.
template <class Project>
Result run(const Inputs& in, Project project) {
  in.x.mutable_grad() = at::Tensor();
  in.weight.mutable_grad() = at::Tensor();
  in.bias.mutable_grad() = at::Tensor();
  at::Tensor out = project();
  out.backward(in.grad.to(out.scalar_type()));
  return {out.detach(), in.x.grad(), in.weight.grad(), in.bias.grad()};
}

Result composition(const Inputs& in) {
  return run(in, [&] {
    return at::cat(
        {at::linear(in.constant, in.weight, in.bias), at::linear(in.x, in.weight, in.bias)}, 1);
  });
}

at::Tensor rows_of(const Inputs& in) {
  return at::cat({in.constant, in.x.detach().to(in.constant.scalar_type())}, 1);
}

Result fused(const Inputs& in) {
  return run(in, [&] {
    return models::constant_rows_linear(in.x, rows_of(in), {in.weight}, {in.bias}).at(0);
  });
}
void expect_close(const Result& got, const Result& want, double tolerance) {
  const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> pairs[] = {
      {"out", {got.out, want.out}},
      {"grad x", {got.grad_x, want.grad_x}},
      {"grad weight", {got.grad_weight, want.grad_weight}},
      {"grad bias", {got.grad_bias, want.grad_bias}}};
  for (const auto& [name, tensors] : pairs) {
    const auto& [a, b] = tensors;
    ASSERT_TRUE(a.defined()) << name;
    EXPECT_EQ(a.sizes(), b.sizes()) << name;
    EXPECT_EQ(a.scalar_type(), b.scalar_type()) << name;
    const double error = (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
    const double scale = b.to(at::kFloat).abs().max().item<double>();
    EXPECT_LE(error, tolerance * scale) << name;
  }
}

TEST(ConstantRowsLinear, EqualsTheTwoProjectionsConcatenatedWithTheirGradients) {
  for (uint64_t seed : {1, 2, 3}) {
    const Inputs in = make_inputs(at::TensorOptions(), seed);
    const Result want = composition(in), got = fused(in);
    expect_close(got, want, 1e-6);
    EXPECT_EQ(got.out.sizes(), (std::vector<int64_t>{kBatch, kConstantRows + kXRows, kOut}));
    EXPECT_EQ(got.grad_x.sizes(), (std::vector<int64_t>{kBatch, kXRows, kIn}));
  }
}

// Two layers (K and V) as one product: each layer's output and gradients its own, also when one
// output is not used (its layer's gradients zeros).
TEST(ConstantRowsLinear, LayersAsOneProductGiveEachItsOwnOutputAndGradients) {
  const Inputs in = make_inputs(at::TensorOptions(), 6);
  const at::Tensor v_weight = (at::randn({4, kIn}) * 0.5).requires_grad_();
  const at::Tensor v_bias = at::randn({4}).requires_grad_();
  const at::Tensor v_grad = at::randn({kBatch, kConstantRows + kXRows, 4});
  const std::vector<at::Tensor> leaves = {in.x, in.weight, in.bias, v_weight, v_bias};
  for (bool use_v : {true, false}) {
    for (const at::Tensor& leaf : leaves) leaf.mutable_grad() = at::Tensor();
    const std::vector<at::Tensor> outs =
        models::constant_rows_linear(in.x, rows_of(in), {in.weight, v_weight}, {in.bias, v_bias});
    ASSERT_EQ(outs.size(), 2u);
    const at::Tensor loss =
        (outs[0] * in.grad).sum() + (use_v ? (outs[1] * v_grad).sum() : at::zeros({}));
    loss.backward();
    std::vector<at::Tensor> got;
    for (const at::Tensor& leaf : leaves) got.push_back(leaf.grad().clone());

    for (const at::Tensor& leaf : leaves) leaf.mutable_grad() = at::Tensor();
    const at::Tensor all = at::cat({in.constant, in.x}, 1);
    const at::Tensor k = at::linear(all, in.weight, in.bias), v = at::linear(all, v_weight, v_bias);
    EXPECT_TRUE(at::allclose(outs[0], k, 1e-5, 1e-6));
    EXPECT_TRUE(at::allclose(outs[1], v, 1e-5, 1e-6));
    const at::Tensor want_loss = (k * in.grad).sum() + (use_v ? (v * v_grad).sum() : at::zeros({}));
    want_loss.backward();
    for (size_t i = 0; i < leaves.size(); ++i) {
      const at::Tensor want =
          leaves[i].grad().defined() ? leaves[i].grad() : at::zeros_like(leaves[i]);
      EXPECT_TRUE(at::allclose(got[i], want, 1e-5, 1e-6)) << "leaf " << i << ", use_v " << use_v;
    }
  }
}

TEST(ConstantRowsLinear, NaNInTheGradientOfOneRowReachesTheWeightGradient) {
  Inputs in = make_inputs(at::TensorOptions(), 4);
  in.grad[1][kConstantRows + 1][2] = std::numeric_limits<float>::quiet_NaN();
  const Result got = fused(in);
  EXPECT_TRUE(got.grad_weight[2].isnan().all().item<bool>());
  EXPECT_FALSE(got.grad_weight[0].isnan().any().item<bool>());
  EXPECT_TRUE(got.grad_bias[2].isnan().item<bool>());
  EXPECT_TRUE(got.grad_x[1][1].isnan().all().item<bool>());
  EXPECT_FALSE(got.grad_x[0].isnan().any().item<bool>());
}

TEST(ConstantRowsLinear, ShapesThatDoNotFitAreRefusedNamingThem) {
  const Inputs in = make_inputs(at::TensorOptions(), 5);
  EXPECT_EQ(testing::error_of([&] {
              models::constant_rows_linear(in.x, in.constant.narrow(1, 0, 1), {in.weight},
                                           {in.bias});
            }),
            "constant_rows_linear: x [3, 2, 8], rows [3, 1, 8], weights [6, 8] and biases [6] do "
            "not fit ([B, L, in], [B, S + L, in], [out, in] each, [out] each)");
  EXPECT_EQ(testing::error_of([&] {
              models::constant_rows_linear(in.x, rows_of(in), {in.weight, in.weight}, {in.bias});
            }),
            "constant_rows_linear: x [3, 2, 8], rows [3, 7, 8], weights [6, 8] [6, 8] and biases "
            "[6] do not fit ([B, L, in], [B, S + L, in], [out, in] each, [out] each)");
}

#if WAM_WITH_CUDA
// As the compiled step runs it: bfloat16 rows under autocast, float32 parameters.
TEST(ConstantRowsLinearCuda, MatchesTheCompositionUnderBf16Autocast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (uint64_t seed : {1, 2}) {
    Inputs in = make_inputs(at::TensorOptions(at::kCUDA), seed);
    in.constant = in.constant.to(at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    const Result want = composition(in), got = fused(in);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
    expect_close(got, want, 1e-2);
  }
}
#endif

}  // namespace
}  // namespace wam
