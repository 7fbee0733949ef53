// The C++ model's losses and gradients on one seeded batch, for tests/scripts/peer_step_test.sh:
// scripts/peer_step.py loads the weights, batch and noise written here, computes the same step
// and must find the same losses and gradients (the peer is a port of this model;
// docs/BENCHMARKS.md, "The PyTorch peer of the step"). Eager ATen on the CPU, float32. Usage:
// wam_peer_reference MODEL_PRESET.json OUT.safetensors OUT holds model.<parameter>,
// grad.<parameter>, batch.<TrainBatch field>, noise.<FlowNoise field> and loss.<term> (total,
// video, action, future_delta, semantic).
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "models/weights_file.h"
#include "models/world_model.h"
#include "train/step_runner.h"

namespace {

using wam::models::TrainBatch;

// Robotwin-shaped latents (24x16: 96 tokens a frame, the presets' future_delta_tokens), shorter
// contexts, and some of everything padded: sample 1's recent frame, sample 0's last 5 action rows,
// the tail of each VLM row, RoboTwin's 66 unused action dims.
TrainBatch seeded_batch(const wam::models::MoTConfig& c) {
  torch::manual_seed(5);
  const int64_t b = 2, h = 24, w = 16, text_len = 7, vlm_len = 12, rows = 32;
  TrainBatch batch;
  batch.video_latents = torch::randn({b, c.latent_channels, 3, h, w});
  batch.anchor_latents = torch::randn({b, c.latent_channels, 1, h, w});
  batch.recent_latents = torch::randn({b, c.latent_channels, 1, h, w});
  batch.recent_is_pad = torch::tensor({false, true}).view({b, 1});
  batch.context = torch::randn({b, text_len, c.text_dim});
  batch.context_mask = torch::ones({b, text_len}, torch::kBool);
  batch.vlm_context = torch::randn({b, vlm_len, c.vlm_dim});
  batch.vlm_mask = torch::arange(vlm_len).lt(torch::tensor({9, 12}).view({b, 1}));
  batch.action = torch::randn({b, rows, c.action_dim});
  batch.action_is_pad = torch::zeros({b, rows}, torch::kBool);
  batch.action_is_pad[0].narrow(0, rows - 5, 5).fill_(true);
  batch.action_dim_is_pad = torch::ones({b, c.action_dim}, torch::kBool);
  for (int64_t d : {0, 1, 2, 3, 4, 5, 6, 16, 40, 41, 42, 43, 44, 45, 46, 56}) {
    if (d < c.action_dim) batch.action_dim_is_pad.select(1, d).fill_(false);
  }
  batch.proprio = torch::randn({b, rows, c.proprio_dim});
  return batch;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: wam_peer_reference MODEL_PRESET.json OUT.safetensors\n";
    return 2;
  }
  const wam::models::MoTConfig config = wam::models::MoTConfig::from_file(argv[1]);
  torch::manual_seed(0);
  wam::models::WorldActionModel model(config);
  const TrainBatch batch = seeded_batch(config);
  at::Generator gen = wam::train::make_noise_generator(at::Device(at::kCPU), 7);
  wam::models::FlowNoise noise = wam::models::sample_flow_noise(batch, config, gen);
  // One sample under semantic_max_sigma and one above: the semantic term's gate is exercised.
  noise.video_sigma = torch::tensor({0.3f, 0.8f});
  const wam::models::LossTerms terms = model->loss(batch, noise);
  terms.total.backward();

  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& p : model->named_parameters()) {
    tensors.emplace_back("model." + p.key(), p.value().detach());
    tensors.emplace_back("grad." + p.key(), p.value().grad());
  }
  const std::vector<std::pair<std::string, at::Tensor>> fields = {
      {"video_latents", batch.video_latents},
      {"memory_video_anchor_latents", batch.anchor_latents},
      {"memory_video_recent_latents", batch.recent_latents},
      {"memory_video_recent_is_pad", batch.recent_is_pad},
      {"context", batch.context},
      {"context_mask", batch.context_mask},
      {"vlm_context", batch.vlm_context},
      {"vlm_mask", batch.vlm_mask},
      {"action", batch.action},
      {"action_is_pad", batch.action_is_pad},
      {"action_dim_is_pad", batch.action_dim_is_pad},
      {"proprio", batch.proprio}};
  for (const auto& [name, tensor] : fields) tensors.emplace_back("batch." + name, tensor);
  tensors.emplace_back("noise.video_noise", noise.video_noise);
  tensors.emplace_back("noise.video_sigma", noise.video_sigma);
  tensors.emplace_back("noise.action_noise", noise.action_noise);
  tensors.emplace_back("noise.action_sigma", noise.action_sigma);
  const std::vector<std::pair<std::string, at::Tensor>> losses = {
      {"total", terms.total},
      {"video", terms.video},
      {"action", terms.action},
      {"future_delta", terms.future_delta},
      {"semantic", terms.semantic}};
  for (const auto& [name, loss] : losses) {
    tensors.emplace_back("loss." + name, loss.detach().reshape({1}));
  }
  wam::models::save_safetensors(argv[2], tensors, {});
  std::cout << "wrote " << tensors.size() << " tensors to " << argv[2] << "\n";
  return 0;
}
