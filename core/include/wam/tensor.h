// Tensor access for Sample fields. Including this pulls in LibTorch: only stages that touch
// tensors include it (and link wam::tensor).
#pragma once

#include <torch/torch.h>

#include "wam/sample.h"

namespace wam {

// "Float[3, 9, 384, 256]" (dtype and sizes); used in shape errors.
std::string describe_tensor(const at::Tensor& t);

}  // namespace wam
