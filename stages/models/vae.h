// The frozen video VAE encoder: Wan2.2's shape contract (48 latent channels, 16x spatial and 4x
// causal temporal compression, so [B, 3, T, H, W] with T % 4 == 1 becomes
// [B, 48, (T - 1) / 4 + 1, H / 16, W / 16]), as a built-in stand-in with seeded random weights or a
// user's TorchScript export of the real encoder.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/frozen_encoder.h"

namespace wam::models {

inline constexpr int64_t kVaeLatentChannels = 48;
inline constexpr int64_t kVaeSpatialFactor = 16;
inline constexpr int64_t kVaeTemporalFactor = 4;

// [B, 48, (T - 1) / 4 + 1, H / 16, W / 16] for a video [B, 3, T, H, W].
std::vector<int64_t> vae_latent_shape(at::IntArrayRef video_shape);

// Throws wam::Error naming `field` and its shape unless `video` is [B, 3, T, H, W] with
// T % 4 == 1 and H, W multiples of 16.
void check_vae_input(const at::Tensor& video, const std::string& field);

class VaeEncoder {
 public:
  virtual ~VaeEncoder() = default;
  // video: float [B, 3, T, H, W] in [-1, 1] (checked by check_vae_input), any device and dtype.
  // Returns the latent mean [B, 48, (T - 1) / 4 + 1, H / 16, W / 16] on the encoder's placement.
  virtual at::Tensor encode(const at::Tensor& video) = 0;
  // Weights held (docs/ENCODERS.md derives the built-in ones' from their structure).
  virtual int64_t parameter_count() const = 0;
  // A built-in stand-in's parameters by name, as its `weights` file holds them (save_safetensors
  // writes one); empty for an exported module.
  virtual std::vector<std::pair<std::string, at::Tensor>> named_weights() const { return {}; }
};

// The stand-in: space-to-depth 2x2, causal 3-D convolutions (time padded on the past side only),
// three stride-2 spatial downsamplings and two causal 2x temporal ones that keep the first frame
// alone and pair the following frames, then a head giving mean and log-variance (the mean is
// returned). Latent frame 0 therefore depends on video frame 0 only, as in Wan2.2. `width` is the
// channel count of the first stage (doubled twice).
std::unique_ptr<VaeEncoder> make_builtin_vae(int64_t width, const BuiltinWeights& weights,
                                             const EncoderPlacement& placement);

// Wan2.2's VAE encoder (Wan2_2_VAE's WanVAE_ encoder with z_dim 48; docs/ENCODERS.md): patchify
// 2x2, a causal 3x3x3 stem to `width`, one level per entry of `multipliers` (width x multiplier
// channels, `res_blocks` residual blocks of RMS-norm, SiLU, causal 3x3x3 conv twice, then a
// stride-2 spatial downsampling between levels, temporal too after the second and third level,
// beside a parameter-free averaging shortcut), a middle block (residual, single-head attention
// within each frame, residual), a head to 2 x 48 channels and a 1x1x1 conv; the mean is returned.
// Frames are encoded as Wan does: the first frame alone, then chunks of 4 frames, each convolution
// carrying its last frames from one chunk to the next (the causal cache). `multipliers` must have
// 4 entries (16x spatial with the patchify).
std::unique_ptr<VaeEncoder> make_wan22_vae(int64_t width, const std::vector<int64_t>& multipliers,
                                           int64_t res_blocks, const BuiltinWeights& weights,
                                           const EncoderPlacement& placement);

// An exported module (load_exported_module: encoder "torchscript" or "aoti") whose forward(video
// float [B, 3, T, H, W] in [-1, 1]) returns the latent mean as above. Checked at load with a probe
// video [1, 3, 5, 64, 64]: any other output shape than [1, 48, 2, 4, 4] is an error naming the
// file, the expected and the returned shape.
std::unique_ptr<VaeEncoder> load_exported_vae(const std::string& encoder, const std::string& path,
                                              const EncoderPlacement& placement);

}  // namespace wam::models
