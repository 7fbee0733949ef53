// AdamW with the parameters' bfloat16 copies (kernels/adamw.h), written by hand: ATen's fused
// AdamW has no output for a copy in another dtype. The arithmetic follows ATen's fused kernel
// (aten/src/ATen/native/cuda/fused_adam_utils.cuh) operation for operation, double where it
// computes in double, so that the parameters take the same values as with ATen's kernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/adamw.h"

namespace wam::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int64_t kChunk = 65536;  // elements of one tensor a block updates
// Each launch carries its tensors and chunks by value (graph replays need no table in device
// memory): CUDA 12.1 and later take up to 32,764 bytes of kernel parameters on Volta and later.
constexpr int kMaxTensors = 96;
constexpr int kMaxChunks = 3072;

struct Launch {
  AdamWTensor tensors[kMaxTensors];
  int32_t chunk_tensor[kMaxChunks];  // index into tensors
  int32_t chunk_index[kMaxChunks];   // the chunk's position in its tensor
};
static_assert(sizeof(Launch) + 64 <= 32764, "kernel parameters over CUDA's limit");

struct Scalars {
  double beta1, beta2, eps, weight_decay;
  const float* lr;
  const float* step;
  const float* grad_scale;
};

struct Moments {
  float param, exp_avg, exp_avg_sq;
};

// One element, as ATen's adam_math (ADAMW mode, no amsgrad, not maximising).
__device__ __forceinline__ Moments update(float param, float grad, float exp_avg, float exp_avg_sq,
                                          const Scalars& s, double lr, double bias_correction1,
                                          double bias_correction2_sqrt) {
  if (s.grad_scale) grad /= static_cast<double>(*s.grad_scale);
  if (s.weight_decay != 0) param -= lr * s.weight_decay * param;
  exp_avg = s.beta1 * exp_avg + (1 - s.beta1) * grad;
  exp_avg_sq = s.beta2 * exp_avg_sq + (1 - s.beta2) * grad * grad;
  const float step_size = lr / bias_correction1;
  const float denom = (std::sqrt(exp_avg_sq) / bias_correction2_sqrt) + s.eps;
  param -= step_size * exp_avg / denom;
  return {param, exp_avg, exp_avg_sq};
}

__device__ __forceinline__ uint16_t bf16_bits(float value) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

__global__ void __launch_bounds__(kThreads) adamw_kernel(const Launch launch, const Scalars s) {
  const AdamWTensor& t = launch.tensors[launch.chunk_tensor[blockIdx.x]];
  const int64_t begin = static_cast<int64_t>(launch.chunk_index[blockIdx.x]) * kChunk;
  const int64_t end = begin + kChunk < t.numel ? begin + kChunk : t.numel;
  const double lr = *s.lr;
  const double step = *s.step;
  const double bias_correction1 = 1 - ::pow(s.beta1, step);
  const double bias_correction2_sqrt = ::sqrt(1 - ::pow(s.beta2, step));
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
  };
  const bool vector = aligned(t.param, 16) && aligned(t.grad, 16) && aligned(t.exp_avg, 16) &&
                      aligned(t.exp_avg_sq, 16) && (!t.bf16_copy || aligned(t.bf16_copy, 8));
  int64_t scalar_begin = begin;
  if (vector) {
    // Four elements a thread per pass, as 16-byte loads and stores (8 for the copy).
    const int64_t quads_end = begin + (end - begin) / 4 * 4;
    // The stores by intrinsic: plain float4 assignments here came out of nvcc as four 4-byte
    // stores each, where one 16-byte store moves the same bytes in a quarter of the instructions
    // (docs/KERNELS.md, version 34).
    for (int64_t i = begin + 4 * threadIdx.x; i < quads_end; i += 4 * kThreads) {
      const float4 p = *reinterpret_cast<const float4*>(t.param + i);
      const float4 g = *reinterpret_cast<const float4*>(t.grad + i);
      const float4 m = *reinterpret_cast<const float4*>(t.exp_avg + i);
      const float4 v = *reinterpret_cast<const float4*>(t.exp_avg_sq + i);
      const auto at = [&](float param, float grad, float exp_avg, float exp_avg_sq) {
        return update(param, grad, exp_avg, exp_avg_sq, s, lr, bias_correction1,
                      bias_correction2_sqrt);
      };
      const Moments x = at(p.x, g.x, m.x, v.x), y = at(p.y, g.y, m.y, v.y),
                    z = at(p.z, g.z, m.z, v.z), w = at(p.w, g.w, m.w, v.w);
      __stwb(reinterpret_cast<float4*>(t.param + i),
             make_float4(x.param, y.param, z.param, w.param));
      __stwb(reinterpret_cast<float4*>(t.exp_avg + i),
             make_float4(x.exp_avg, y.exp_avg, z.exp_avg, w.exp_avg));
      __stwb(reinterpret_cast<float4*>(t.exp_avg_sq + i),
             make_float4(x.exp_avg_sq, y.exp_avg_sq, z.exp_avg_sq, w.exp_avg_sq));
      if (t.bf16_copy) {
        // Two bfloat16 a word: one 8-byte store.
        __stwb(reinterpret_cast<uint2*>(t.bf16_copy + i),
               make_uint2(bf16_bits(x.param) | uint32_t{bf16_bits(y.param)} << 16,
                          bf16_bits(z.param) | uint32_t{bf16_bits(w.param)} << 16));
      }
    }
    scalar_begin = quads_end;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += kThreads) {
    const Moments out = update(t.param[i], t.grad[i], t.exp_avg[i], t.exp_avg_sq[i], s, lr,
                               bias_correction1, bias_correction2_sqrt);
    t.param[i] = out.param;
    t.exp_avg[i] = out.exp_avg;
    t.exp_avg_sq[i] = out.exp_avg_sq;
    if (t.bf16_copy) t.bf16_copy[i] = bf16_bits(out.param);
  }
}

void check(cudaError_t status) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("adamw_step: ") + cudaGetErrorString(status));
  }
}

}  // namespace

void adamw_step(const AdamWTensor* tensors, int64_t count, const AdamWHyper& hyper, const float* lr,
                const float* step, const float* grad_scale, CUstream_st* stream) {
  const Scalars scalars{hyper.beta1, hyper.beta2, hyper.eps, hyper.weight_decay,
                        lr,          step,        grad_scale};
  // Static: 29 KB is too much for the stack of a host thread that may be small.
  static thread_local Launch launch;
  int tensors_in = 0, chunks_in = 0;
  auto flush = [&] {
    if (chunks_in == 0) return;
    adamw_kernel<<<chunks_in, kThreads, 0, stream>>>(launch, scalars);
    check(cudaGetLastError());
    tensors_in = 0;
    chunks_in = 0;
  };
  for (int64_t t = 0; t < count; ++t) {
    const int64_t chunks = (tensors[t].numel + kChunk - 1) / kChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      if (chunks_in == kMaxChunks) flush();
      // A tensor enters a launch with its first chunk there.
      if (c == 0 || chunks_in == 0) {
        if (tensors_in == kMaxTensors) flush();
        launch.tensors[tensors_in++] = tensors[t];
      }
      launch.chunk_tensor[chunks_in] = tensors_in - 1;
      launch.chunk_index[chunks_in] = static_cast<int32_t>(c);
      ++chunks_in;
    }
  }
  flush();
}

}  // namespace wam::kernels
