// The loss terms of one training step as host numbers: what TrainStep logs and emits.
#pragma once

#include "models/world_model.h"

namespace wam::train {

struct Losses {
  double total = 0;
  double video = 0;
  double action = 0;
  double future_delta = 0;
  double semantic = 0;
};

// Reads the model's loss tensors to the host (synchronises with their device).
Losses read_losses(const models::LossTerms& terms);

}  // namespace wam::train
