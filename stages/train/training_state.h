// Training-state files: what TrainStep saves (`checkpoint_dir`, `save_every`) and continues from
// (`resume`): the model's parameters and buffers, the optimizer state and the training progress.
// Not to be confused with activation checkpointing (models/activation_checkpoint.h).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "models/world_model.h"
#include "train/optimizer.h"

namespace wam::train {

// What a training-state file holds besides the model and optimizer: the step count (which is also
// the schedule's position) and the noise generator's state.
struct TrainProgress {
  int64_t step = 0;
  at::Tensor noise_rng_state;  // uint8, from at::Generator::get_state()
};

// Writes model parameters and buffers ("model.<name>"), optimizer state, progress and the model
// config to the safetensors file `dir/step_<N>.safetensors`, then points `dir/latest` at it, both
// through wam::AtomicFile (synced before and after the rename). Returns the file's path. The model
// part loads into a model as published weights do (models::load_module_weights, prefix "model.").
std::string save_training_state(const std::string& dir, const models::WorldActionModel& model,
                                const AdamW& optimizer, const TrainProgress& progress);

// Loads a file written by save_training_state into the model and optimizer (copied into their
// existing tensors, so captured graphs stay valid). `path` is a step_<N>.safetensors file (or a
// step_<N>.pt of the earlier LibTorch-archive format) or a directory of them (then its `latest`
// pointer is followed). Throws wam::Error when the file is missing or
// was written for another model config.
TrainProgress load_training_state(const std::string& path, models::WorldActionModel& model,
                                  AdamW& optimizer);

}  // namespace wam::train
