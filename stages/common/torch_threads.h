// The data stages run their torch ops (copies, stacks, the CPU Augment's few ATen calls) with one
// intra-op thread: the graph's workers provide the parallelism. Under OpenMP the intra-op thread
// count is per OS thread, so each worker that runs such a stage sets it once. Left at the default
// (every core), each large copy can wake a team of threads that then spin: on a 16-core host,
// decoding at `--threads 1` kept about seven cores busy wherever frames were copied on the host
// (docs/BENCHMARKS.md, issue 24).
#pragma once

#include <ATen/Parallel.h>

namespace wam::stages {

inline void use_one_torch_thread() {
  if (at::get_num_threads() != 1) at::set_num_threads(1);
}

}  // namespace wam::stages
