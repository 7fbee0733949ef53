// Hand-written: no library linked here converts NV12 in device memory to RGB with the arithmetic
// of the project's reference conversion (kernels/nv12_rgb.h).
#include "kernels/nv12_rgb.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/block_reduce.cuh"

namespace wam::kernels {
namespace {

constexpr int kThreads = 128;  // pixels of one row a block

// video::nv12_to_rgb's constants, each a double rounded to float as ATen rounds a scalar for a
// float tensor: BT.601, limited range stretched to full, and the offsets fitted to libswscale.
struct Conversion {
  float luma_scale, chroma_scale, red_blue_offset, green_offset;
};

// Every operation is one ATen kernel's in video::nv12_to_rgb, rounded on its own: the _rn
// intrinsics keep nvcc from contracting a multiply and an add into one FMA.
__device__ __forceinline__ uint8_t level(float value) {
  return static_cast<uint8_t>(fminf(fmaxf(rintf(value), 0.0f), 255.0f));
}

__global__ void __launch_bounds__(kThreads)
    nv12_to_rgb_kernel(Nv12Frame frame, uint8_t* rgb, int64_t rgb_pitch, Conversion k) {
  const int64_t x = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (x >= frame.width) return;
  float y = frame.luma[row * frame.luma_pitch + x];
  const uint8_t* pair = frame.chroma + (row / 2) * frame.chroma_pitch + 2 * (x / 2);
  float u = __fsub_rn(static_cast<float>(pair[0]), 128.0f);
  float v = __fsub_rn(static_cast<float>(pair[1]), 128.0f);
  if (!frame.full_range) {
    y = __fmul_rn(__fsub_rn(y, 16.0f), k.luma_scale);
    u = __fmul_rn(u, k.chroma_scale);
    v = __fmul_rn(v, k.chroma_scale);
  }
  const float red = __fsub_rn(__fadd_rn(y, __fmul_rn(v, 1.402f)), k.red_blue_offset);
  const float green = __fsub_rn(
      __fsub_rn(__fsub_rn(y, __fmul_rn(u, 0.344136f)), __fmul_rn(v, 0.714136f)), k.green_offset);
  const float blue = __fsub_rn(__fadd_rn(y, __fmul_rn(u, 1.772f)), k.red_blue_offset);
  uint8_t* out = rgb + row * rgb_pitch + 3 * x;
  out[0] = level(red);
  out[1] = level(green);
  out[2] = level(blue);
}

}  // namespace

void nv12_to_rgb(const Nv12Frame& frame, uint8_t* rgb, int64_t rgb_pitch, CUstream_st* stream) {
  if (frame.height <= 0 || frame.width <= 0) return;
  const Conversion k{static_cast<float>(255.0 / 219.0), static_cast<float>(255.0 / 224.0),
                     frame.full_range ? 0.5f : 1.0f, frame.full_range ? 1.0f : 1.5f};
  const dim3 blocks(static_cast<unsigned>((frame.width + kThreads - 1) / kThreads),
                    static_cast<unsigned>(frame.height));
  nv12_to_rgb_kernel<<<blocks, kThreads, 0, stream>>>(frame, rgb, rgb_pitch, k);
  check_launch("nv12_to_rgb");
}

}  // namespace wam::kernels
