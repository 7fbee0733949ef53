// A small TrainBatch of seeded random tensors for model and training-step tests: 8x8 latents of
// 3 frames, 5 text tokens, 4 VLM tokens, a 32-step action chunk, nothing padded.
#pragma once

#include <torch/torch.h>

#include "models/world_model.h"

namespace wam::testing {

inline models::TrainBatch random_train_batch(const models::MoTConfig& c, int64_t b) {
  torch::manual_seed(11);
  const int64_t h = 8, w = 8, text_len = 5, vlm_len = 4, chunk = 32;
  models::TrainBatch batch;
  batch.video_latents = torch::randn({b, c.latent_channels, 3, h, w});
  batch.anchor_latents = torch::randn({b, c.latent_channels, 1, h, w});
  batch.recent_latents = torch::randn({b, c.latent_channels, 1, h, w});
  batch.recent_is_pad = torch::zeros({b, 1}, torch::kBool);
  batch.context = torch::randn({b, text_len, c.text_dim});
  batch.context_mask = torch::ones({b, text_len}, torch::kBool);
  batch.vlm_context = torch::randn({b, vlm_len, c.vlm_dim});
  batch.vlm_mask = torch::ones({b, vlm_len}, torch::kBool);
  batch.action = torch::randn({b, chunk, c.action_dim});
  batch.action_is_pad = torch::zeros({b, chunk}, torch::kBool);
  batch.action_dim_is_pad = torch::zeros({b, c.action_dim}, torch::kBool);
  batch.proprio = torch::randn({b, chunk, c.proprio_dim});
  return batch;
}

}  // namespace wam::testing
