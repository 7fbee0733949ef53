// The two ways Augment (stages/data/augment.cc) turns one sample's frames into its outputs, given
// the random parameters it drew for the sample:
// - on the host, with the uint8 kernels of image_ops.h (libswscale resizes, a uint8 warp, one
//   fused colour pass): what host frames get;
// - as ATen ops on the frames' device: what frames in GPU memory get (NVDEC's, or host frames
//   Augment uploads with `device: cuda`). The float ops of image_ops.h are the definition the
//   host kernels are tested against, so both give the same images within the rounding the
//   kernels do between steps (augment_test's TensorOps* tests bound it below one level a pixel).
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "data/augment_params.h"
#include "data/image_ops.h"

namespace wam::stages {

// Where `frames: all` keeps each camera's frames: [anchor, recent, window...].
inline constexpr int64_t kAnchorIndex = 0;
inline constexpr int64_t kRecentIndex = 1;
inline constexpr int64_t kWindowStart = 2;

// Everything random about one sample; `std::nullopt` parts are off.
struct SensorNoise {
  std::optional<double> downsample_scale;
  std::optional<double> blur_sigma;
  // Seeds the Gaussian noise's generator: the host's (CPU) generator for host frames, a CUDA
  // generator for device frames, whose Philox draws other values than the CPU's Mersenne twister
  // from the same seed (the same sample still gets the same noise every run).
  std::optional<uint64_t> gaussian_seed;
};
struct SampleDraws {
  std::vector<std::optional<image_ops::CameraWarp>> camera_warps;  // per camera
  image_ops::ColorAdjustment color;
  std::optional<std::array<double, 3>> rgb_gain;
  std::optional<image_ops::Shadow> shadow;
  std::vector<SensorNoise> sensor_noise;  // per camera
};

// Augment's outputs for one sample (augment.cc says what each holds); video and the memory
// frames are undefined with `frames: current`.
struct AugmentedImages {
  at::Tensor vlm_current_images;
  at::Tensor video;
  at::Tensor memory_video_anchor;
  at::Tensor memory_video_recent;
};

// `frames` is uint8 [V, T, H, W, 3], already checked against `params`; `draws` is null when
// nothing is random. `frames` is only read.
AugmentedImages augment_on_host(const at::Tensor& frames, const AugmentParams& params,
                                const SampleDraws* draws);
// augment_on_host() from VideoDecode's planes (its planes_size): `current_frames` uint8 [V, 1, H,
// W, 3] (the VLM's), `planes` uint8 [V, T, 3, camera_size] (the canvas's; `frames: all` only). Only
// read.
AugmentedImages augment_planes_from_decode(const at::Tensor& current_frames,
                                           const at::Tensor& planes, const AugmentParams& params,
                                           const SampleDraws* draws);
AugmentedImages augment_with_tensor_ops(const at::Tensor& frames, const AugmentParams& params,
                                        const SampleDraws* draws);

// augment_with_tensor_ops() on CUDA device `device` (host frames uploaded first), on a stream of
// its own. Returns when the outputs are written, so a stage's busy time is its GPU work and no
// queue of work builds up behind it; they may be used, and freed, on the device's default stream,
// where the stages after Augment run. Throws wam::Error in a build without CUDA.
AugmentedImages augment_on_gpu(const at::Tensor& frames, const at::Device& device,
                               const AugmentParams& params, const SampleDraws* draws);

}  // namespace wam::stages
