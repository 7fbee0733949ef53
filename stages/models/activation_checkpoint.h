// Activation checkpointing (recompute in backward) for the LibTorch C++ frontend, which has no
// torch.utils.checkpoint. Not to be confused with TrainStep's training-state files
// (train/training_state.h).
#pragma once

#include <torch/torch.h>

#include <functional>

namespace wam::models {

using RecomputedFn =
    std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)>;

// Runs fn(inputs) without keeping its activations; backward recomputes fn on the saved inputs and
// backpropagates through the recomputation (the reentrant scheme of torch.utils.checkpoint).
// Gradients flow to `inputs` and accumulate into every parameter fn uses. fn must be deterministic
// (no dropout, no random draws) and must read any other tensor it needs by capture; captured
// tensors get no gradient.
torch::autograd::variable_list activation_checkpoint(const RecomputedFn& fn,
                                                     const torch::autograd::variable_list& inputs);

}  // namespace wam::models
