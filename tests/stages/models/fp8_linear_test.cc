// The FP8 linear layers (models/fp8_linear.h, kernels/fp8.h): the casts' bytes decoded by hand
// (E4M3 and E5M2 as the OCP FP8 specification defines them), the delayed scaling's window, and
// the products against the float32 composition within FP8's rounding. Where the build has no
// fused kernels, fp8_linear is the bf16 path, checked against ATen.
#include "models/fp8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "models/epilogue_linear.h"

namespace wam {
namespace {

using models::Fp8LinearState;

#if WAM_FUSED_KERNELS
constexpr bool kFusedKernels = true;
#else
constexpr bool kFusedKernels = false;
#endif

TEST(Fp8LinearTest, RunsTheBf16PathWhereFp8DoesNotApply) {
  const at::Tensor x = at::randn({2, 5, 32}).requires_grad_();
  const at::Tensor weight = (at::randn({48, 32}) * 0.2).requires_grad_();
  const at::Tensor bias = at::randn({48}).requires_grad_();
  EXPECT_FALSE(models::fp8_linear_applies(x, weight));  // float32 on the CPU
  Fp8LinearState state(at::zeros({}));
  const at::Tensor out = models::fp8_linear(x, weight, bias, state);
  EXPECT_TRUE(at::allclose(out, at::linear(x, weight, bias), 1e-5, 1e-6));
  EXPECT_FALSE(state.history(Fp8LinearState::kInput).defined());  // no cast ran
  EXPECT_EQ(models::fp8_linears_built(), kFusedKernels);
}

// One FP8 byte's value: sign, exponent (bias 7 for E4M3, 15 for E5M2), mantissa; subnormals at
// exponent 0; E4M3 has no infinities and one NaN per sign (all ones), E5M2 IEEE-like specials.
float decode_fp8(uint8_t byte, bool e5m2) {
  const int mantissa_bits = e5m2 ? 2 : 3, exponent_bias = e5m2 ? 15 : 7;
  const int exponent = (byte & 0x7f) >> mantissa_bits, mantissa = byte & ((1 << mantissa_bits) - 1);
  const float sign = byte & 0x80 ? -1.f : 1.f;
  if (!e5m2 && exponent == 15 && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e5m2 && exponent == 31) {
    return mantissa != 0 ? std::numeric_limits<float>::quiet_NaN()
                         : sign * std::numeric_limits<float>::infinity();
  }
  if (exponent == 0)
    return sign * std::ldexp(static_cast<float>(mantissa), 1 - exponent_bias - mantissa_bits);
  return sign * std::ldexp(1.f + static_cast<float>(mantissa) / (1 << mantissa_bits),
                           exponent - exponent_bias);
}

// The cast's bytes as the float32 values the product sees (each times scale_inverse).
at::Tensor dequantized(const Fp8LinearState::Cast& cast, bool e5m2) {
  const at::Tensor bytes = cast.data.cpu().contiguous();
  const float scale_inverse = cast.scale_inverse.item<float>();
  at::Tensor values = at::empty(bytes.sizes(), at::kFloat);
  const uint8_t* in = bytes.data_ptr<uint8_t>();
  float* out = values.data_ptr<float>();
  for (int64_t i = 0; i < bytes.numel(); ++i) out[i] = decode_fp8(in[i], e5m2) * scale_inverse;
  return values;
}

// A history entry: the tag in the high 32 bits, the amax's float bits in the low.
int64_t entry(uint32_t tag, float amax) {
  uint32_t bits = 0;
  std::memcpy(&bits, &amax, sizeof(bits));
  return static_cast<int64_t>((static_cast<uint64_t>(tag) << 32) | bits);
}

// bf16 values from -amax to amax, amax (a power of two) among them, as a [32, 32] matrix.
at::Tensor spanning(float amax, const at::Device& device) {
  return (at::linspace(-1, 1, 1024, at::TensorOptions().device(device)) * amax)
      .to(at::kBFloat16)
      .view({32, 32});
}

class Fp8CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!models::fp8_linears_built() || !torch::cuda::is_available()) {
      GTEST_SKIP() << "no FP8 kernels in this build, or no CUDA device";
    }
    steps_done = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  }

  const at::Device device{at::kCUDA, 0};
  at::Tensor steps_done;
};

TEST_F(Fp8CudaTest, FirstCastScalesByItsOwnAmaxAndRecordsIt) {
  Fp8LinearState state(steps_done);
  const at::Tensor x =
      (at::randn({64, 256}, at::TensorOptions().device(device)) * 3).to(at::kBFloat16);
  const Fp8LinearState::Cast cast = state.cast(Fp8LinearState::kInput, x);
  EXPECT_EQ(cast.data.scalar_type(), at::kByte);
  EXPECT_EQ(cast.data.sizes(), x.sizes());
  const float amax = x.abs().max().to(at::kFloat).item<float>();
  EXPECT_FLOAT_EQ(cast.scale_inverse.item<float>(), amax / 448.f);
  // E4M3 keeps 3 mantissa bits: within half a unit, 1/16 of the value, above the subnormals.
  const at::Tensor want = x.to(at::kFloat).cpu(), got = dequantized(cast, false);
  const at::Tensor allowed = want.abs() * (1.0 / 16 + 1e-6) + std::ldexp(1.f, -10) * amax / 448.f;
  EXPECT_TRUE(((got - want).abs() <= allowed).all().item<bool>())
      << "max error " << (got - want).abs().max().item<float>();
  // The first cast recorded its amax under the previous step's tag (0), then under its own (1).
  const at::Tensor history = state.history(Fp8LinearState::kInput).cpu();
  EXPECT_EQ(history[0].item<int64_t>(), entry(0, amax));
  EXPECT_EQ(history[1].item<int64_t>(), entry(1, amax));
  EXPECT_EQ(history.narrow(0, 2, 14).count_nonzero().item<int64_t>(), 0);
}

// Step s scales by the largest amax of steps s-15 .. s-1 (its own is left out), and a value
// beyond the scale saturates at the format's largest instead of becoming infinite.
TEST_F(Fp8CudaTest, ScaleFollowsTheAmaxOfTheLastFifteenSteps) {
  Fp8LinearState state(steps_done);
  auto cast_at = [&](int step, float amax) {
    steps_done.fill_(static_cast<float>(step));
    return state.cast(Fp8LinearState::kInput, spanning(amax, device));
  };
  EXPECT_FLOAT_EQ(cast_at(0, 2.f).scale_inverse.item<float>(), 2.f / 448.f);
  const Fp8LinearState::Cast larger = cast_at(1, 8.f);  // scaled for 2: saturates at 2
  EXPECT_FLOAT_EQ(larger.scale_inverse.item<float>(), 2.f / 448.f);
  EXPECT_FLOAT_EQ(dequantized(larger, false).max().item<float>(), 2.f);
  // Step 1's 8 stays in the window through step 16, then leaves it.
  for (int step = 2; step <= 17; ++step) {
    const float want = step <= 16 ? 8.f / 448.f : 1.f / 448.f;
    EXPECT_FLOAT_EQ(cast_at(step, 1.f).scale_inverse.item<float>(), want) << "step " << step;
  }
}

TEST_F(Fp8CudaTest, GradientsCastToE5M2AndNaNStaysNaN) {
  Fp8LinearState state(steps_done);
  at::Tensor grad = at::randn({32, 64}, at::TensorOptions().device(device)) * 1e-4;
  grad[3][5] = std::numeric_limits<float>::quiet_NaN();
  const Fp8LinearState::Cast cast =
      state.cast(Fp8LinearState::kOutputGradient, grad.to(at::kBFloat16));
  const at::Tensor got = dequantized(cast, true),
                   want = grad.to(at::kBFloat16).to(at::kFloat).cpu();
  EXPECT_TRUE(std::isnan(got[3][5].item<float>()));
  const at::Tensor finite = want.isnan().logical_not();
  const float amax = want.masked_select(finite).abs().max().item<float>();
  EXPECT_FLOAT_EQ(cast.scale_inverse.item<float>(), amax / 57344.f);
  // E5M2 keeps 2 mantissa bits: within 1/8 of the value.
  const at::Tensor error = (got - want).abs().masked_select(finite);
  const at::Tensor allowed =
      want.abs().masked_select(finite) * (1.0 / 8 + 1e-6) + std::ldexp(1.f, -17) * amax / 57344.f;
  EXPECT_TRUE((error <= allowed).all().item<bool>());
}

TEST_F(Fp8CudaTest, CastWritesBothLayoutsOfTheSameBytes) {
  const at::Tensor weight = at::randn({96, 160}, at::TensorOptions().device(device));
  Fp8LinearState state(steps_done);
  const Fp8LinearState::Cast cast = state.cast(Fp8LinearState::kWeight, weight);
  EXPECT_EQ(cast.data.sizes(), (std::vector<int64_t>{96, 160}));
  EXPECT_EQ(cast.transposed.sizes(), (std::vector<int64_t>{160, 96}));
  EXPECT_TRUE(at::equal(cast.transposed.cpu(), cast.data.cpu().t().contiguous()));
  const at::Tensor want = weight.cpu(), got = dequantized(cast, false);
  const float amax = want.abs().max().item<float>();
  const at::Tensor allowed = want.abs() * (1.0 / 16 + 1e-6) + std::ldexp(1.f, -10) * amax / 448.f;
  EXPECT_TRUE(((got - want).abs() <= allowed).all().item<bool>());
  EXPECT_FALSE(cast.column_sums.defined());
}

// The column sums (a bias gradient) are the unscaled values' sums, over a last block of rows that
// the 64-row tiles do not fill, and have the same bits on every run.
TEST_F(Fp8CudaTest, ColumnSumsAreTheGradientsBiasGradient) {
  const at::Tensor grad =
      (at::randn({200, 64}, at::TensorOptions().device(device)) * 1e-3).to(at::kBFloat16);
  Fp8LinearState state(steps_done);
  const Fp8LinearState::Cast first = state.cast(Fp8LinearState::kOutputGradient, grad, true);
  const Fp8LinearState::Cast second = state.cast(Fp8LinearState::kOutputGradient, grad, true);
  ASSERT_TRUE(first.column_sums.defined());
  EXPECT_EQ(first.column_sums.sizes(), (std::vector<int64_t>{64}));
  EXPECT_EQ(first.column_sums.scalar_type(), at::kFloat);
  const at::Tensor want = grad.to(at::kFloat).sum(0);
  EXPECT_TRUE(at::allclose(first.column_sums, want, 1e-5, 1e-8));
  EXPECT_TRUE(at::equal(first.column_sums, second.column_sums));
}

// ||got - want|| / ||want||, over all elements.
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor w = want.to(at::kFloat).cpu();
  return ((got.to(at::kFloat).cpu() - w).norm() / w.norm()).item<double>();
}

struct LinearCase {
  at::Tensor x, weight, bias, grad;
};

// Bounds from each format's rounding: an E4M3 operand's elements are off by 2.6% RMS (uniform
// rounding within 3 mantissa bits), E5M2's by 5.2%; a product of two such operands by their
// root-sum-square, 3.7% (forward) and 5.8% (input and weight gradients, E5M2 x E4M3). The bounds
// leave room above those; a wrong layout or scale is off by 100% or more. The bias gradients are
// sums of the unscaled gradient.
constexpr double kForwardBound = 0.06, kGradientBound = 0.10, kBf16Bound = 0.01;

TEST_F(Fp8CudaTest, LinearMatchesTheFloat32ProductWithinFp8Rounding) {
  const auto options = at::TensorOptions().device(device);
  Fp8LinearState state(steps_done);
  for (int step = 0; step < 2; ++step) {  // the second from the first one's history
    steps_done.fill_(static_cast<float>(step));
    const at::Tensor x = at::randn({2, 1024, 512}, options).to(at::kBFloat16).requires_grad_();
    const at::Tensor weight = (at::randn({1536, 512}, options) / std::sqrt(512.0)).requires_grad_();
    const at::Tensor bias = (at::randn({1536}, options) * 0.1).requires_grad_();
    const at::Tensor grad = at::randn({2, 1024, 1536}, options) * 1e-3;
    ASSERT_TRUE(models::fp8_linear_applies(x, weight));
    const at::Tensor out = models::fp8_linear(x, weight, bias, state);
    out.backward(grad.to(at::kBFloat16));
    EXPECT_EQ(out.scalar_type(), at::kBFloat16);
    EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 1024, 1536}));
    const at::Tensor x32 = x.detach().to(at::kFloat).requires_grad_();
    const at::Tensor w32 = weight.detach().clone().requires_grad_();
    const at::Tensor b32 = bias.detach().clone().requires_grad_();
    const at::Tensor want = at::linear(x32, w32, b32);
    want.backward(grad.to(at::kBFloat16).to(at::kFloat));
    EXPECT_LT(relative_error(out, want), kForwardBound) << "step " << step;
    EXPECT_LT(relative_error(x.grad(), x32.grad()), kGradientBound) << "step " << step;
    EXPECT_LT(relative_error(weight.grad(), w32.grad()), kGradientBound) << "step " << step;
    EXPECT_LT(relative_error(bias.grad(), b32.grad()), kBf16Bound) << "step " << step;
    EXPECT_EQ(weight.grad().scalar_type(), at::kFloat);
  }
}

TEST_F(Fp8CudaTest, GeluMlpMatchesTheFloat32CompositionWithinFp8Rounding) {
  const auto options = at::TensorOptions().device(device);
  Fp8LinearState in_state(steps_done), out_state(steps_done);
  const at::Tensor x = at::randn({2, 512, 256}, options).to(at::kBFloat16).requires_grad_();
  const at::Tensor in_weight = (at::randn({1024, 256}, options) / 16).requires_grad_();
  const at::Tensor in_bias = (at::randn({1024}, options) * 0.1).requires_grad_();
  const at::Tensor out_weight = (at::randn({256, 1024}, options) / 32).requires_grad_();
  const at::Tensor out_bias = (at::randn({256}, options) * 0.1).requires_grad_();
  const at::Tensor grad = at::randn({2, 512, 256}, options) * 1e-3;
  const at::Tensor out =
      models::fp8_gelu_mlp(x, in_weight, in_bias, out_weight, out_bias, in_state, out_state);
  out.backward(grad.to(at::kBFloat16));
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& t : {x, in_weight, in_bias, out_weight, out_bias}) {
    leaves.push_back(t.detach().to(at::kFloat).requires_grad_());
  }
  const at::Tensor want = at::linear(at::gelu(at::linear(leaves[0], leaves[1], leaves[2]), "tanh"),
                                     leaves[3], leaves[4]);
  want.backward(grad.to(at::kBFloat16).to(at::kFloat));
  // Two FP8 products in a row each way: the first's error passes into the second's operand.
  EXPECT_LT(relative_error(out, want), 2 * kForwardBound);
  EXPECT_LT(relative_error(x.grad(), leaves[0].grad()), 2 * kGradientBound);
  EXPECT_LT(relative_error(out_weight.grad(), leaves[3].grad()), 2 * kForwardBound);
  EXPECT_LT(relative_error(out_bias.grad(), leaves[4].grad()), kBf16Bound);
  EXPECT_LT(relative_error(in_weight.grad(), leaves[1].grad()), 2 * kGradientBound);
  EXPECT_LT(relative_error(in_bias.grad(), leaves[2].grad()), kGradientBound);
}

}  // namespace
}  // namespace wam
