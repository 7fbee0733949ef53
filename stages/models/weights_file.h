// LibTorch tensors to and from safetensors files (common/safetensors.h): training-state files are
// written this way, and a model's parameters can be initialised from published weights by name.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/io/safetensors.h"

namespace wam::models {

// Writes `tensors` (any device; copied to the host, contiguous) and `metadata` to `path`,
// atomically (a temporary beside it, synced, renamed: wam/atomic_file.h). Throws wam::Error naming
// the file on a dtype safetensors has no name for.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata);

// The tensor `info` of `reader`, as a CPU tensor.
at::Tensor read_tensor(const safetensors::Reader& reader, const safetensors::TensorInfo& info);

// Copies the tensors named prefix + <name> in `path` into `module`'s parameters and buffers of
// that name (any dtype: converted; the module's device kept). Every problem is reported in one
// wam::Error naming the file: parameters the file lacks, tensors in it under `prefix` the module
// has none of, and shapes that differ.
void load_module_weights(torch::nn::Module& module, const std::string& path,
                         const std::string& prefix = "");

}  // namespace wam::models
