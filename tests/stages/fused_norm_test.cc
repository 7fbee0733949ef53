// The fused RMSNorm + RoPE kernels against the same maths in plain ATen ops (CUDA only), and the
// MoT's loss and gradients with and without them.
#include "models/fused_norm.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "models/world_model.h"
#include "train/step_runner.h"

namespace wam {
namespace {

constexpr double kEps = 1e-6;

// rope(rms_norm(x) * weight) in float32 ATen ops; x [B, N, W], rotation [N, d/2] complex64.
at::Tensor reference(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& rotation,
                     int64_t head_dim) {
  const at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + kEps) * weight;
  if (!rotation.defined()) return normed;
  const int64_t b = x.size(0), n = x.size(1), w = x.size(2), half = head_dim / 2;
  at::Tensor pairs = at::view_as_complex(normed.reshape({b, n, w / head_dim, half, 2}));
  return at::view_as_real(pairs * rotation.view({1, n, 1, half})).reshape({b, n, w});
}

at::Tensor rotation_for(int64_t tokens, int64_t head_dim, const at::TensorOptions& options) {
  const at::Tensor angles = at::rand({tokens, head_dim / 2}, options) * 6.3;
  return at::polar(at::ones_like(angles), angles);
}

struct Case {
  at::ScalarType dtype;
  int64_t b, n, heads, head_dim;
  bool rope, strided;  // strided: x is the first third of a [B, N, 3W] tensor (a fused QKV)
  double tolerance;
};

void check(const Case& c) {
  const at::Device device(at::kCUDA, 0);
  const auto floats = at::TensorOptions().dtype(at::kFloat).device(device);
  torch::manual_seed(3);
  const int64_t w = c.heads * c.head_dim;
  at::Tensor wide = at::randn({c.b, c.n, c.strided ? 3 * w : w}, floats).to(c.dtype);
  at::Tensor x = wide.narrow(2, 0, w).detach().requires_grad_(true);
  at::Tensor x_ref = x.detach().clone().requires_grad_(true);
  at::Tensor weight = (1 + 0.1 * at::randn({w}, floats)).requires_grad_(true);
  at::Tensor weight_ref = weight.detach().clone().requires_grad_(true);
  const at::Tensor rotation = c.rope ? rotation_for(c.n, c.head_dim, floats) : at::Tensor();
  ASSERT_TRUE(models::fused_rms_norm_rope_applies(x, c.head_dim));

  at::Tensor out = models::fused_rms_norm_rope(x, weight, rotation, c.head_dim, kEps);
  const at::Tensor expected = reference(x_ref, weight_ref, rotation, c.head_dim);
  EXPECT_EQ(out.scalar_type(), c.dtype);
  EXPECT_EQ(out.sizes(), x.sizes());
  EXPECT_TRUE(at::allclose(out.to(at::kFloat), expected, c.tolerance, c.tolerance))
      << "forward, max error " << (out.to(at::kFloat) - expected).abs().max().item<float>();

  const at::Tensor grad = at::randn(x.sizes(), floats);
  out.backward(grad.to(c.dtype));
  expected.backward(grad.to(c.dtype).to(at::kFloat));
  EXPECT_TRUE(at::allclose(x.grad().to(at::kFloat), x_ref.grad().to(at::kFloat), c.tolerance,
                           c.tolerance))
      << "grad x, max error "
      << (x.grad().to(at::kFloat) - x_ref.grad().to(at::kFloat)).abs().max().item<float>();
  // grad weight sums over every row: its error grows with the row count.
  const double weight_tolerance = c.tolerance * static_cast<double>(c.b * c.n);
  EXPECT_TRUE(at::allclose(weight.grad(), weight_ref.grad(), c.tolerance, weight_tolerance))
      << "grad weight, max error " << (weight.grad() - weight_ref.grad()).abs().max().item<float>();
}

TEST(FusedNormTest, NeverAppliesToCpuTensors) {
  EXPECT_FALSE(models::fused_rms_norm_rope_applies(torch::randn({2, 4, 32}), 16));
}

TEST(FusedNormCudaTest, MatchesAtenOpsForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  check({at::kFloat, 2, 7, 3, 8, /*rope=*/true, /*strided=*/false, 1e-5});
  check({at::kFloat, 2, 7, 3, 8, /*rope=*/false, /*strided=*/true, 1e-5});
  // The base preset's q/k width (16 heads of 96) as the fused QKV output it reads, in bf16.
  check({at::kBFloat16, 2, 37, 16, 96, /*rope=*/true, /*strided=*/true, 2e-2});
  // The paper preset's width: 6 pairs per thread.
  check({at::kFloat, 1, 5, 24, 128, /*rope=*/true, /*strided=*/false, 1e-5});
}

TEST(FusedNormCudaTest, RefusesWhatTheKernelsCannotTake) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  EXPECT_TRUE(models::fused_rms_norm_rope_applies(torch::randn({2, 4, 4096}, cuda), 128));
  EXPECT_FALSE(models::fused_rms_norm_rope_applies(torch::randn({2, 4, 4352}, cuda), 128));
  EXPECT_FALSE(
      models::fused_rms_norm_rope_applies(torch::randn({2, 4, 32}, cuda).to(at::kHalf), 16));
  EXPECT_FALSE(
      models::fused_rms_norm_rope_applies(torch::randn({4, 2, 32}, cuda).transpose(0, 1), 16));
}

// The whole model: the fused path (fused norms, attention masks as biases, the VLM context's
// projection without an input gradient) gives the unfused loss and gradients (float32, no
// autocast), with padding in every mask.
TEST(FusedNormCudaTest, ModelLossAndGradientsMatchTheUnfusedPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  const at::Device device(at::kCUDA, 0);
  std::ifstream in(std::string(WAM_SOURCE_DIR) + "/configs/model/tiny.json");
  nlohmann::json preset = nlohmann::json::parse(in);
  preset["future_delta_tokens"] = 16;
  const models::MoTConfig config = models::MoTConfig::from_json(preset);
  torch::manual_seed(11);
  const int64_t b = 2, chunk = 32;
  models::TrainBatch batch;
  const auto f = at::TensorOptions().device(device);
  batch.video_latents = torch::randn({b, config.latent_channels, 3, 8, 8}, f);
  batch.anchor_latents = torch::randn({b, config.latent_channels, 1, 8, 8}, f);
  batch.recent_latents = torch::randn({b, config.latent_channels, 1, 8, 8}, f);
  batch.recent_is_pad = torch::zeros({b, 1}, f.dtype(torch::kBool));
  batch.context = torch::randn({b, 5, config.text_dim}, f);
  batch.context_mask = torch::ones({b, 5}, f.dtype(torch::kBool));
  batch.vlm_context = torch::randn({b, 4, config.vlm_dim}, f);
  batch.vlm_mask = torch::ones({b, 4}, f.dtype(torch::kBool));
  batch.action = torch::randn({b, chunk, config.action_dim}, f);
  batch.action_is_pad = torch::zeros({b, chunk}, f.dtype(torch::kBool));
  batch.action_dim_is_pad = torch::zeros({b, config.action_dim}, f.dtype(torch::kBool));
  batch.proprio = torch::randn({b, chunk, config.proprio_dim}, f);
  batch.recent_is_pad[1].fill_(true);
  batch.action_is_pad[0].narrow(0, chunk - 4, 4).fill_(true);
  batch.vlm_mask[1].narrow(0, 2, 2).fill_(false);
  batch.context_mask[0][4].fill_(false);
  at::Generator gen = train::make_noise_generator(device, 3);
  const models::FlowNoise noise = models::sample_flow_noise(batch, config, gen);

  std::vector<double> losses;
  std::vector<std::vector<at::Tensor>> grads;
  for (bool fused : {false, true}) {
    torch::manual_seed(5);
    models::WorldActionModel model(config);
    model->to(device);
    model->set_fused_kernels(fused);
    const models::LossTerms loss = model->loss(batch, noise);
    loss.total.backward();
    losses.push_back(loss.total.item<double>());
    std::vector<at::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
    grads.push_back(g);
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-5 * std::abs(losses[0]));
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    EXPECT_TRUE(at::allclose(grads[0][i], grads[1][i], 1e-3, 1e-5)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace wam
