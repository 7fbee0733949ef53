#include "train/losses.h"

namespace wam::train {

Losses read_losses(const models::LossTerms& terms) {
  return {terms.total.item<double>(), terms.video.item<double>(), terms.action.item<double>(),
          terms.future_delta.item<double>(), terms.semantic.item<double>()};
}

}  // namespace wam::train
