// The fused RMSNorm + RoPE kernels against the same maths in plain ATen ops (CUDA only), and the
// MoT's loss and gradients with and without them.
#include "models/fused_norm.h"

#include <gtest/gtest.h>

#include <fstream>
#include <limits>
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
  EXPECT_TRUE(
      at::allclose(x.grad().to(at::kFloat), x_ref.grad().to(at::kFloat), c.tolerance, c.tolerance))
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
  // 4 elements a load: heads of 6 split a load between two heads' pairs, and x 8 bytes past an
  // allocation is not aligned to 4 floats.
  EXPECT_FALSE(models::fused_rms_norm_rope_applies(torch::randn({2, 4, 36}, cuda), 6));
  EXPECT_FALSE(models::fused_rms_norm_rope_applies(
      torch::randn({2 + 2 * 4 * 32}, cuda).narrow(0, 2, 2 * 4 * 32).view({2, 4, 32}), 16));
  EXPECT_FALSE(
      models::fused_rms_norm_rope_applies(torch::randn({2, 4, 32}, cuda).to(at::kHalf), 16));
  EXPECT_FALSE(
      models::fused_rms_norm_rope_applies(torch::randn({4, 2, 32}, cuda).transpose(0, 1), 16));
}

// Rows [first, first + n) of `buffer` [B, N, C] as a leaf tensor of its own over its memory, as
// epilogue_joint_linear_into returns each expert's QKV product.
at::Tensor rows_of(const at::Tensor& buffer, int64_t first, int64_t n) {
  const int64_t width = buffer.size(2);
  return at::empty({0}, buffer.options())
      .set_(buffer.storage(), buffer.storage_offset() + first * width, {buffer.size(0), n, width},
            {buffer.size(1) * width, width, 1});
}

// fused_joint_qkv against the concatenation of each expert's reference q/k and v: values and the
// gradients of both QKV products and all four norm weights. A NaN in one expert's q row stays NaN
// in that row of the output and nowhere else. `one_buffer`: both experts' QKV rows in one buffer
// [B, Nv + Na, 3W], whose v columns are then the joint v itself.
void check_joint(at::ScalarType dtype, int64_t b, int64_t video_n, int64_t action_n, int64_t heads,
                 int64_t head_dim, double tolerance, bool one_buffer = false) {
  const auto floats = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  torch::manual_seed(7);
  const int64_t w = heads * head_dim;
  const int64_t lengths[2] = {video_n, action_n};
  const at::Tensor buffer =
      one_buffer ? at::randn({b, video_n + action_n, 3 * w}, floats).to(dtype) : at::Tensor();
  std::vector<at::Tensor> qkv, qkv_ref, weights, weights_ref, rotations;
  for (int e = 0; e < 2; ++e) {
    const at::Tensor x = one_buffer ? rows_of(buffer, e == 0 ? 0 : video_n, lengths[e])
                                    : at::randn({b, lengths[e], 3 * w}, floats).to(dtype);
    qkv.push_back(x.requires_grad_(true));
    qkv_ref.push_back(qkv.back().detach().clone().requires_grad_(true));
    for (int part = 0; part < 2; ++part) {
      weights.push_back((1 + 0.1 * at::randn({w}, floats)).requires_grad_(true));
      weights_ref.push_back(weights.back().detach().clone().requires_grad_(true));
    }
    rotations.push_back(rotation_for(lengths[e], head_dim, floats));
  }
  ASSERT_TRUE(models::fused_joint_qkv_applies(qkv[0], qkv[1], head_dim));
  const models::JointQkv joint =
      models::fused_joint_qkv(qkv[0], qkv[1], {weights[0], weights[1]}, {weights[2], weights[3]},
                              rotations[0], rotations[1], head_dim, kEps);
  if (one_buffer) {
    EXPECT_EQ(joint.v.data_ptr(), buffer.narrow(2, 2 * w, w).data_ptr());
    EXPECT_EQ(joint.v.strides(), (std::vector<int64_t>{(video_n + action_n) * 3 * w, 3 * w, 1}));
  } else {
    EXPECT_TRUE(joint.v.is_contiguous());
  }
  std::vector<at::Tensor> expected(3);
  for (int part = 0; part < 3; ++part) {
    std::vector<at::Tensor> rows;
    for (int e = 0; e < 2; ++e) {
      const at::Tensor x = qkv_ref[e].narrow(2, part * w, w);
      rows.push_back(part == 2 ? x.to(at::kFloat)
                               : reference(x, weights_ref[2 * e + part], rotations[e], head_dim));
    }
    expected[part] = at::cat(rows, 1);
  }
  const at::Tensor outputs[3] = {joint.q, joint.k, joint.v};
  at::Tensor loss = at::zeros({}, floats), loss_ref = at::zeros({}, floats);
  for (int part = 0; part < 3; ++part) {
    EXPECT_EQ(outputs[part].sizes(), (std::vector<int64_t>{b, video_n + action_n, w}));
    EXPECT_EQ(outputs[part].scalar_type(), dtype);
    const at::Tensor got = outputs[part].to(at::kFloat);
    EXPECT_TRUE(at::allclose(got, expected[part], tolerance, tolerance))
        << "part " << part << ", max error " << (got - expected[part]).abs().max().item<float>();
    const at::Tensor grad = at::randn(got.sizes(), floats).to(dtype);
    loss = loss + (outputs[part] * grad).to(at::kFloat).sum();
    loss_ref = loss_ref + (expected[part] * grad.to(at::kFloat)).sum();
  }
  loss.backward();
  loss_ref.backward();
  for (int e = 0; e < 2; ++e) {
    const at::Tensor got = qkv[e].grad().to(at::kFloat), want = qkv_ref[e].grad().to(at::kFloat);
    EXPECT_TRUE(at::allclose(got, want, tolerance, tolerance))
        << "grad of expert " << e << "'s QKV, max error " << (got - want).abs().max().item<float>();
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    const double weight_tolerance = tolerance * static_cast<double>(b * lengths[i / 2]);
    EXPECT_TRUE(at::allclose(weights[i].grad(), weights_ref[i].grad(), tolerance, weight_tolerance))
        << "grad of norm weight " << i << ", max error "
        << (weights[i].grad() - weights_ref[i].grad()).abs().max().item<float>();
  }
  // NaN in the action expert's q of sample 0, token 1: that row of q is NaN, nothing else.
  at::Tensor poisoned = qkv[1].detach().clone();
  poisoned[0][1][3] = std::numeric_limits<float>::quiet_NaN();
  const models::JointQkv nan_joint =
      models::fused_joint_qkv(qkv[0].detach(), poisoned, {weights[0], weights[1]},
                              {weights[2], weights[3]}, rotations[0], rotations[1], head_dim, kEps);
  const at::Tensor nan_rows = nan_joint.q.isnan().any(2);
  EXPECT_TRUE(nan_rows[0][video_n + 1].item<bool>());
  EXPECT_EQ(nan_rows.sum().item<int64_t>(), 1);
  EXPECT_FALSE(nan_joint.k.isnan().any().item<bool>());
  EXPECT_FALSE(nan_joint.v.isnan().any().item<bool>());
}

TEST(FusedNormCudaTest, JointQkvMatchesTheConcatenatedExperts) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  check_joint(at::kFloat, 2, 7, 5, 3, 8, 1e-5);
  check_joint(at::kFloat, 1, 1, 3, 2, 4, 1e-5);
  // The base preset's 16 heads of 96 in bf16, more video than action tokens.
  check_joint(at::kBFloat16, 2, 37, 9, 16, 96, 2e-2);
}

// As epilogue_joint_linear_into leaves the two experts' QKV products in the compiled step: each
// expert's rows read with the buffer's sample stride, v not copied, every gradient as before.
TEST(FusedNormCudaTest, JointQkvReadsVInPlaceWhereTheProductsAreOneBuffersRows) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  check_joint(at::kFloat, 2, 7, 5, 3, 8, 1e-5, /*one_buffer=*/true);
  check_joint(at::kBFloat16, 2, 37, 9, 16, 96, 2e-2, /*one_buffer=*/true);
}

TEST(FusedNormCudaTest, JointQkvRefusesWhatItCannotTake) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor video = torch::randn({2, 4, 96}, cuda), action = torch::randn({2, 3, 96}, cuda);
  EXPECT_TRUE(models::fused_joint_qkv_applies(video, action, 16));
  EXPECT_FALSE(models::fused_joint_qkv_applies(video, torch::randn({2, 3, 48}, cuda), 16));
  EXPECT_FALSE(models::fused_joint_qkv_applies(video, action.to(at::kBFloat16), 16));
  EXPECT_FALSE(models::fused_joint_qkv_applies(video, torch::randn({1, 3, 96}, cuda), 16));
  EXPECT_FALSE(models::fused_joint_qkv_applies(video.cpu(), action.cpu(), 16));
  EXPECT_FALSE(
      models::fused_joint_qkv_applies(video, torch::randn({2, 96, 3}, cuda).transpose(1, 2), 16));
  // Rows of one buffer are taken; rows with a gap between them are not.
  const at::Tensor buffer = torch::randn({2, 7, 96}, cuda);
  EXPECT_TRUE(models::fused_joint_qkv_applies(rows_of(buffer, 0, 4), rows_of(buffer, 4, 3), 16));
  EXPECT_FALSE(models::fused_joint_qkv_applies(torch::randn({2, 4, 192}, cuda).narrow(2, 0, 96),
                                               action, 16));
}

// The whole model: the fused path (fused norms, attention masks as biases, the VLM context's
// projection without an input gradient, each expert's tokens split off as its own tensor) gives
// the unfused loss and gradients (float32, no autocast), with padding in every mask.
void expect_fused_model_matches_unfused(const at::Device& device) {
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

TEST(FusedNormCudaTest, ModelLossAndGradientsMatchTheUnfusedPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!models::fused_kernels_built()) GTEST_SKIP() << "built without a CUDA compiler";
  expect_fused_model_matches_unfused(at::Device(at::kCUDA, 0));
}

// On the CPU the kernels do not apply and their ATen fallbacks run; what the fused path changes
// around them (split_tokens) is checked here on every machine.
TEST(FusedNormTest, ModelLossAndGradientsMatchTheUnfusedPathOnCpu) {
  expect_fused_model_matches_unfused(at::Device(at::kCPU));
}

}  // namespace
}  // namespace wam
