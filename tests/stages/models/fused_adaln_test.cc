// The fused AdaLN kernels (LayerNorm + modulation, LayerNorm with weight and bias, gated residual)
// and the fused clipped AdamW update against the ATen compositions they replace, forward and
// gradients, on fresh random inputs of several shapes (CUDA only).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "models/epilogue_linear.h"
#include "models/fused_norm.h"
#include "models/modulation.h"
#include "train/optimizer.h"

namespace wam {
namespace {

constexpr double kEps = 1e-6;

// max |got - want| / max |want|: NaN anywhere makes it NaN, and every comparison with it fails.
double relative_error(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor w = want.to(at::kDouble), g = got.to(at::kDouble);
  return ((g - w).abs().max() / w.abs().max().clamp_min(1e-30)).item<double>();
}

// The error bound of a result stored in `dtype`.
double tolerance_of(at::ScalarType dtype) { return dtype == at::kBFloat16 ? 1e-2 : 1e-5; }

struct Shape {
  int64_t batch, tokens, width;
  std::vector<int64_t> segment_of_group;  // empty: one group, one segment
  at::ScalarType x_dtype, out_dtype;
};

models::TokenGroups groups_of(const Shape& s, const at::Device& device) {
  if (s.segment_of_group.empty()) return {};
  return {static_cast<int64_t>(s.segment_of_group.size()),
          torch::tensor(s.segment_of_group, torch::kLong).to(device)};
}

int64_t segments_of(const Shape& s) {
  int64_t segments = 1;
  for (int64_t g : s.segment_of_group) segments = std::max(segments, g + 1);
  return segments;
}

std::string name_of(const Shape& s) {
  return "[" + std::to_string(s.batch) + ", " + std::to_string(s.tokens) + ", " +
         std::to_string(s.width) + "] " + c10::toString(s.x_dtype) + " -> " +
         c10::toString(s.out_dtype);
}

// The video stream (fp32 residual, bf16 products, 6 groups in 2 segments), the action stream (bf16,
// one group), float32 throughout (the model test's setting), and odd sizes.
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {2, 576, 1536, {0, 0, 0, 1, 1, 1}, at::kFloat, at::kBFloat16},
      {3, 32, 512, {}, at::kBFloat16, at::kBFloat16},
      {2, 12, 64, {0, 1, 1}, at::kFloat, at::kFloat},
      {1, 7, 4096, {}, at::kFloat, at::kBFloat16},
      {5, 3, 12, {0, 1, 2}, at::kFloat, at::kFloat},
  };
  return all;
}

class FusedAdaLnCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  }
  const at::Device device_{at::kCUDA, 0};
  at::TensorOptions floats() const { return at::TensorOptions().dtype(at::kFloat).device(device_); }
  // A leaf copy of t with its own gradient.
  static at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }
};

TEST_F(FusedAdaLnCudaTest, NormModulateMatchesLayerNormThenModulate) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(name_of(s));
    torch::manual_seed(7);
    const models::TokenGroups layout = groups_of(s, device_);
    // An offset and a spread per row, as a residual stream has.
    const at::Tensor x0 =
        (at::randn({s.batch, s.tokens, s.width}, floats()) * 3 + 1.5).to(s.x_dtype);
    const at::Tensor shift0 = at::randn({s.batch, segments_of(s), s.width}, floats());
    const at::Tensor scale0 = at::randn({s.batch, segments_of(s), s.width}, floats()) * 0.2;
    ASSERT_TRUE(models::fused_norm_modulate_applies(x0, layout, s.out_dtype));
    at::Tensor x = leaf(x0), shift = leaf(shift0), scale = leaf(scale0);
    at::Tensor x_ref = leaf(x0.to(at::kFloat)), shift_ref = leaf(shift0), scale_ref = leaf(scale0);

    const at::Tensor out = models::fused_norm_modulate(x, shift, scale, layout, s.out_dtype, kEps);
    const at::Tensor expected = models::modulate(at::layer_norm(x_ref, {s.width}, {}, {}, kEps),
                                                 shift_ref, scale_ref, layout);
    EXPECT_EQ(out.scalar_type(), s.out_dtype);
    EXPECT_EQ(out.sizes(), x.sizes());
    EXPECT_LT(relative_error(out, expected), tolerance_of(s.out_dtype));

    const at::Tensor grad = at::randn(out.sizes(), floats()).to(s.out_dtype);
    out.backward(grad);
    expected.backward(grad.to(at::kFloat));
    EXPECT_EQ(x.grad().scalar_type(), s.x_dtype);
    const double tolerance = std::max(tolerance_of(s.x_dtype), tolerance_of(s.out_dtype));
    EXPECT_LT(relative_error(x.grad(), x_ref.grad()), tolerance) << "grad x";
    EXPECT_LT(relative_error(shift.grad(), shift_ref.grad()), tolerance) << "grad shift";
    EXPECT_LT(relative_error(scale.grad(), scale_ref.grad()), tolerance) << "grad scale";
  }
}

TEST_F(FusedAdaLnCudaTest, LayerNormWithWeightAndBiasMatchesAten) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(name_of(s));
    torch::manual_seed(8);
    const at::Tensor x0 = at::randn({s.batch, s.tokens, s.width}, floats()).to(s.x_dtype);
    const at::Tensor weight0 = 1 + 0.1 * at::randn({s.width}, floats());
    const at::Tensor bias0 = 0.1 * at::randn({s.width}, floats());
    at::Tensor x = leaf(x0), weight = leaf(weight0), bias = leaf(bias0);
    at::Tensor x_ref = leaf(x0.to(at::kFloat)), weight_ref = leaf(weight0), bias_ref = leaf(bias0);

    const at::Tensor out = models::fused_layer_norm(x, weight, bias, s.out_dtype, kEps);
    const at::Tensor expected = at::layer_norm(x_ref, {s.width}, weight_ref, bias_ref, kEps);
    EXPECT_EQ(out.scalar_type(), s.out_dtype);
    EXPECT_LT(relative_error(out, expected), tolerance_of(s.out_dtype));

    const at::Tensor grad = at::randn(out.sizes(), floats()).to(s.out_dtype);
    out.backward(grad);
    expected.backward(grad.to(at::kFloat));
    const double tolerance = std::max(tolerance_of(s.x_dtype), tolerance_of(s.out_dtype));
    EXPECT_LT(relative_error(x.grad(), x_ref.grad()), tolerance) << "grad x";
    EXPECT_LT(relative_error(weight.grad(), weight_ref.grad()), tolerance) << "grad weight";
    EXPECT_LT(relative_error(bias.grad(), bias_ref.grad()), tolerance) << "grad bias";
  }
}

// x used twice, through the norm and as the residual: the *_and_residual ops give the norm's
// output, x itself as the residual, and x's two gradients summed by the norm's backward kernel,
// against the same ops with x read twice and autograd summing.
TEST_F(FusedAdaLnCudaTest, NormAndResidualSumXsGradientsInTheKernel) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(name_of(s));
    torch::manual_seed(9);
    const models::TokenGroups layout = groups_of(s, device_);
    const at::Tensor x0 =
        (at::randn({s.batch, s.tokens, s.width}, floats()) * 3 + 1.5).to(s.x_dtype);
    const at::Tensor shift = at::randn({s.batch, segments_of(s), s.width}, floats());
    const at::Tensor scale = at::randn({s.batch, segments_of(s), s.width}, floats()) * 0.2;
    const at::Tensor weight = 1 + 0.1 * at::randn({s.width}, floats());
    const at::Tensor bias = 0.1 * at::randn({s.width}, floats());
    const at::Tensor grad_normed = at::randn(x0.sizes(), floats()).to(s.out_dtype);
    const at::Tensor grad_residual = at::randn(x0.sizes(), floats()).to(s.x_dtype);
    for (const bool modulated : {true, false}) {
      SCOPED_TRACE(modulated ? "norm and modulation" : "layer norm");
      at::Tensor x = leaf(x0), x_ref = leaf(x0);
      const models::NormedAndResidual got =
          modulated
              ? models::fused_norm_modulate_and_residual(x, shift, scale, layout, s.out_dtype, kEps)
              : models::fused_layer_norm_and_residual(x, weight, bias, s.out_dtype, kEps);
      const at::Tensor want =
          modulated ? models::fused_norm_modulate(x_ref, shift, scale, layout, s.out_dtype, kEps)
                    : models::fused_layer_norm(x_ref, weight, bias, s.out_dtype, kEps);
      EXPECT_TRUE(at::equal(got.normed, want));
      EXPECT_TRUE(at::equal(got.residual, x0));
      EXPECT_EQ(got.residual.data_ptr(), x.data_ptr());  // x itself, no copy
      torch::autograd::backward({got.normed, got.residual}, {grad_normed, grad_residual});
      torch::autograd::backward({want, x_ref}, {grad_normed, grad_residual});
      EXPECT_EQ(x.grad().scalar_type(), s.x_dtype);
      EXPECT_LT(relative_error(x.grad(), x_ref.grad()), tolerance_of(s.x_dtype));
    }
  }
}

// The cross-attention's output product and the FFN's norm after it, as post_attention runs them
// on the video stream: given the product's gradient channel, the norm's backward kernel writes the
// product's output gradient in bfloat16 there (the float32 one's bits, rounded), and every
// gradient before the norm has the same bits as where the product casts that gradient itself.
TEST_F(FusedAdaLnCudaTest, NormWritesTheProductsOutputGradientInBf16IntoItsChannel) {
  const Shape& s = shapes()[0];
  torch::manual_seed(10);
  const models::TokenGroups layout = groups_of(s, device_);
  const std::vector<int64_t> sizes = {s.batch, s.tokens, s.width};
  const at::Tensor x0 = at::randn(sizes, floats()).to(at::kBFloat16);
  const at::Tensor weight0 = at::randn({s.width, s.width}, floats()) * 0.03;
  const at::Tensor bias0 = 0.1 * at::randn({s.width}, floats());
  const at::Tensor residual0 = at::randn(sizes, floats());
  const at::Tensor shift = at::randn({s.batch, segments_of(s), s.width}, floats());
  const at::Tensor scale = at::randn({s.batch, segments_of(s), s.width}, floats()) * 0.2;
  const at::Tensor grad_normed = at::randn(sizes, floats()).to(at::kBFloat16);
  const at::Tensor grad_residual = at::randn(sizes, floats());
  std::vector<at::Tensor> grads[2];
  for (const bool with_channel : {false, true}) {
    SCOPED_TRACE(with_channel ? "channel taken" : "no channel");
    at::Tensor x = leaf(x0), weight = leaf(weight0), bias = leaf(bias0), residual = leaf(residual0);
    const models::LinearResidual product =
        models::epilogue_linear_residual(x, weight, bias, residual);
    ASSERT_TRUE(product.grad_channel.defined());
    at::Tensor out_grad, channel_grad;
    product.out.register_hook([&](const at::Tensor& g) { out_grad = g; });
    product.grad_channel.register_hook([&](const at::Tensor& g) { channel_grad = g; });
    const models::NormedAndResidual normed = models::fused_norm_modulate_and_residual(
        product.out, shift, scale, layout, at::kBFloat16, kEps,
        with_channel ? product.grad_channel : at::Tensor());
    torch::autograd::backward({normed.normed, normed.residual}, {grad_normed, grad_residual});
    ASSERT_TRUE(out_grad.defined());
    EXPECT_EQ(channel_grad.defined(), with_channel);
    if (with_channel) {
      EXPECT_EQ(channel_grad.scalar_type(), at::kBFloat16);
      EXPECT_TRUE(at::equal(channel_grad, out_grad.to(at::kBFloat16)));
    }
    grads[with_channel] = {x.grad(), weight.grad(), bias.grad(), residual.grad()};
  }
  for (size_t i = 0; i < grads[0].size(); ++i) {
    ASSERT_TRUE(grads[1][i].defined()) << "gradient " << i;
    EXPECT_TRUE(at::equal(grads[1][i], grads[0][i])) << "gradient " << i;
  }
}

// residual in x_dtype, update in out_dtype (the product's output), as the MoT's streams.
TEST_F(FusedAdaLnCudaTest, AddGatedMatchesResidualPlusGated) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(name_of(s));
    torch::manual_seed(9);
    const models::TokenGroups layout = groups_of(s, device_);
    const at::Tensor residual0 = at::randn({s.batch, s.tokens, s.width}, floats()).to(s.x_dtype);
    const at::Tensor update0 = at::randn({s.batch, s.tokens, s.width}, floats()).to(s.out_dtype);
    const at::Tensor gate0 = at::randn({s.batch, segments_of(s), s.width}, floats());
    ASSERT_TRUE(models::fused_add_gated_applies(residual0, update0, layout));
    at::Tensor residual = leaf(residual0), update = leaf(update0), gate = leaf(gate0);
    at::Tensor residual_ref = leaf(residual0.to(at::kFloat)),
               update_ref = leaf(update0.to(at::kFloat)), gate_ref = leaf(gate0);

    const at::Tensor out = models::fused_add_gated(residual, update, gate, layout);
    const at::Tensor expected = residual_ref + models::gated(update_ref, gate_ref, layout);
    EXPECT_EQ(out.scalar_type(), s.x_dtype);
    EXPECT_LT(relative_error(out, expected), tolerance_of(s.x_dtype));

    const at::Tensor grad = at::randn(out.sizes(), floats()).to(s.x_dtype);
    out.backward(grad);
    expected.backward(grad.to(at::kFloat));
    EXPECT_EQ(update.grad().scalar_type(), s.out_dtype);
    const double tolerance = std::max(tolerance_of(s.x_dtype), tolerance_of(s.out_dtype));
    EXPECT_LT(relative_error(residual.grad(), residual_ref.grad()), tolerance) << "grad residual";
    EXPECT_LT(relative_error(update.grad(), update_ref.grad()), tolerance) << "grad update";
    EXPECT_LT(relative_error(gate.grad(), gate_ref.grad()), tolerance) << "grad gate";
  }
}

// The update a layer's product without its bias, the bias added and its gradient summed in the
// gated residual's kernels: as residual + (update + bias) * gate, every gradient (the bias's a sum
// over every row of every sample).
TEST_F(FusedAdaLnCudaTest, AddBiasedGatedMatchesResidualPlusGatedUpdatePlusBias) {
  for (const Shape& s : shapes()) {
    SCOPED_TRACE(name_of(s));
    torch::manual_seed(12);
    const models::TokenGroups layout = groups_of(s, device_);
    const at::Tensor residual0 = at::randn({s.batch, s.tokens, s.width}, floats()).to(s.x_dtype);
    const at::Tensor update0 = at::randn({s.batch, s.tokens, s.width}, floats()).to(s.out_dtype);
    const at::Tensor gate0 = at::randn({s.batch, segments_of(s), s.width}, floats());
    const at::Tensor bias0 = at::randn({s.width}, floats());
    ASSERT_TRUE(models::fused_add_biased_gated_applies(residual0, update0, bias0, layout));
    at::Tensor residual = leaf(residual0), update = leaf(update0), gate = leaf(gate0),
               bias = leaf(bias0);
    at::Tensor residual_ref = leaf(residual0.to(at::kFloat)),
               update_ref = leaf(update0.to(at::kFloat)), gate_ref = leaf(gate0),
               bias_ref = leaf(bias0);

    const at::Tensor out = models::fused_add_biased_gated(residual, update, bias, gate, layout);
    const at::Tensor expected =
        residual_ref + models::gated(update_ref + bias_ref, gate_ref, layout);
    EXPECT_EQ(out.scalar_type(), s.x_dtype);
    EXPECT_LT(relative_error(out, expected), tolerance_of(s.x_dtype));

    const at::Tensor grad = at::randn(out.sizes(), floats()).to(s.x_dtype);
    out.backward(grad);
    expected.backward(grad.to(at::kFloat));
    const double tolerance = std::max(tolerance_of(s.x_dtype), tolerance_of(s.out_dtype));
    EXPECT_LT(relative_error(residual.grad(), residual_ref.grad()), tolerance) << "grad residual";
    EXPECT_LT(relative_error(update.grad(), update_ref.grad()), tolerance) << "grad update";
    EXPECT_LT(relative_error(gate.grad(), gate_ref.grad()), tolerance) << "grad gate";
    ASSERT_TRUE(bias.grad().defined());
    EXPECT_EQ(bias.grad().sizes(), (std::vector<int64_t>{s.width}));
    EXPECT_EQ(bias.grad().scalar_type(), at::kFloat);
    EXPECT_LT(relative_error(bias.grad(), bias_ref.grad()), tolerance) << "grad bias";
  }
  // A bias of the wrong width or dtype is refused.
  const at::Tensor x = at::randn({2, 8, 32}, floats());
  EXPECT_FALSE(models::fused_add_biased_gated_applies(x, x, at::randn({16}, floats()), {}));
  EXPECT_FALSE(models::fused_add_biased_gated_applies(
      x, x, at::randn({32}, floats()).to(at::kBFloat16), {}));
}

// The modulation and weight gradients are sums over many blocks of rows: added up in a fixed
// order, they have the same bits on every run (data-parallel training is checked bit for bit
// against the plain step, tests/dist).
TEST_F(FusedAdaLnCudaTest, GradientsHaveTheSameBitsOnEveryRun) {
  const Shape s = shapes().front();
  const models::TokenGroups layout = groups_of(s, device_);
  torch::manual_seed(10);
  const at::Tensor x0 = at::randn({s.batch, s.tokens, s.width}, floats());
  const at::Tensor rows0 = at::randn({s.batch, segments_of(s), s.width}, floats());
  const at::Tensor grad = at::randn({s.batch, s.tokens, s.width}, floats());
  const at::Tensor weight0 = 1 + 0.1 * at::randn({s.width}, floats());
  const at::Tensor rotation =
      at::polar(at::ones({s.tokens, 48}, floats()), at::rand({s.tokens, 48}, floats()) * 6.3);
  std::vector<std::vector<at::Tensor>> runs;
  for (int run = 0; run < 2; ++run) {
    at::Tensor x = leaf(x0), shift = leaf(rows0), scale = leaf(rows0), gate = leaf(rows0);
    at::Tensor weight = leaf(weight0), bias = leaf(weight0), norm_weight = leaf(weight0),
               update_bias = leaf(weight0);
    at::Tensor total =
        (models::fused_norm_modulate(x, shift, scale, layout, at::kBFloat16, kEps).to(at::kFloat) *
         grad)
            .sum() +
        (models::fused_layer_norm(x, weight, bias, at::kBFloat16, kEps).to(at::kFloat) * grad)
            .sum() +
        (models::fused_add_gated(x, x.to(at::kBFloat16), gate, layout) * grad).sum() +
        (models::fused_add_biased_gated(x, x.to(at::kBFloat16), update_bias, gate, layout) * grad)
            .sum() +
        (models::fused_rms_norm_rope(x, norm_weight, rotation, 96, kEps) * grad).sum();
    total.backward();
    runs.push_back({shift.grad(), scale.grad(), gate.grad(), weight.grad(), bias.grad(),
                    norm_weight.grad(), update_bias.grad()});
  }
  for (size_t i = 0; i < runs[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(runs[0][i], runs[1][i])) << "gradient " << i;
  }
}

TEST_F(FusedAdaLnCudaTest, NanInTheInputComesOutAsNan) {
  const Shape s = shapes().front();
  const models::TokenGroups layout = groups_of(s, device_);
  at::Tensor x = at::randn({s.batch, s.tokens, s.width}, floats());
  x[1][100][7] = std::numeric_limits<float>::quiet_NaN();
  const at::Tensor rows = at::zeros({s.batch, segments_of(s), s.width}, floats());
  const at::Tensor out = models::fused_norm_modulate(x, rows, rows, layout, at::kBFloat16, kEps);
  EXPECT_TRUE(out[1][100].isnan().all().item<bool>());  // the row's mean and variance
  EXPECT_FALSE(out[0].isnan().any().item<bool>());
  EXPECT_TRUE(models::fused_add_gated(x, x.to(at::kBFloat16), rows, layout)[1][100][7]
                  .isnan()
                  .item<bool>());
}

TEST_F(FusedAdaLnCudaTest, RefusesWhatTheKernelsCannotTake) {
  const models::TokenGroups one;
  EXPECT_FALSE(models::fused_norm_modulate_applies(at::randn({2, 4, 32}), one, at::kFloat));
  EXPECT_FALSE(models::fused_norm_modulate_applies(at::randn({2, 4, 30}, floats()), one,
                                                   at::kFloat));  // width not a multiple of 4
  EXPECT_FALSE(models::fused_norm_modulate_applies(at::randn({2, 4, 8192}, floats()), one,
                                                   at::kFloat));  // wider than 4096
  EXPECT_FALSE(models::fused_norm_modulate_applies(
      at::randn({2, 4, 32}, floats()).to(at::kBFloat16), one, at::kFloat));  // widening
  EXPECT_FALSE(models::fused_norm_modulate_applies(at::randn({4, 2, 32}, floats()).transpose(0, 1),
                                                   one, at::kFloat));
  EXPECT_FALSE(models::fused_norm_modulate_applies(at::randn({2, 5, 32}, floats()),
                                                   {3, at::Tensor()}, at::kFloat));  // 5 % 3
  EXPECT_FALSE(models::fused_add_gated_applies(at::randn({2, 4, 32}, floats()).to(at::kBFloat16),
                                               at::randn({2, 4, 32}, floats()), one));
  EXPECT_THROW(models::fused_norm_modulate(at::randn({2, 4, 30}, floats()), at::Tensor(),
                                           at::Tensor(), one, at::kFloat, kEps),
               std::exception);
}

// clip_and_step (clipping inside ATen's fused AdamW) moves the parameters as clip_grad_norm and
// step() do, with the gradient norm above the limit and below it.
TEST_F(FusedAdaLnCudaTest, ClipAndStepMatchesClipThenStep) {
  for (const double grad_scale : {50.0, 0.01}) {
    SCOPED_TRACE("gradient scale " + std::to_string(grad_scale));
    torch::manual_seed(4);
    std::vector<at::Tensor> a, b;
    for (const int64_t size : {1000, 37, 4096}) {
      const at::Tensor p = at::randn({size}, floats());
      a.push_back(p.clone().requires_grad_(true));
      b.push_back(p.clone().requires_grad_(true));
    }
    train::AdamW fused(a, train::AdamWOptions{}), plain(b, train::AdamWOptions{});
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {  // as a backward would leave them
        const at::Tensor g = at::randn(a[i].sizes(), floats()) * grad_scale;
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      fused.set_lr(1e-2);
      plain.set_lr(1e-2);
      const double norm_fused = fused.clip_and_step(1.0).item<double>();
      const double norm_plain = train::clip_grad_norm(b, 1.0).item<double>();
      plain.step();
      EXPECT_NEAR(norm_fused, norm_plain, 1e-5 * norm_plain);
    }
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_LT(relative_error(a[i].detach(), b[i].detach()), 1e-5) << "parameter " << i;
      EXPECT_LT(relative_error(fused.exp_avg()[i], plain.exp_avg()[i]), 1e-5) << "moment " << i;
      EXPECT_LT(relative_error(fused.exp_avg_sq()[i], plain.exp_avg_sq()[i]), 1e-5);
    }
  }
}

}  // namespace
}  // namespace wam
