#include "models/vae.h"

#include "wam/error.h"
#include "wam/tensor.h"

namespace wam::models {

std::vector<int64_t> vae_latent_shape(at::IntArrayRef video_shape) {
  return {video_shape[0], kVaeLatentChannels, (video_shape[2] - 1) / kVaeTemporalFactor + 1,
          video_shape[3] / kVaeSpatialFactor, video_shape[4] / kVaeSpatialFactor};
}

void check_vae_input(const at::Tensor& video, const std::string& field) {
  const std::string where = "field \"" + field + "\" is " + describe_tensor(video);
  if (video.dim() != 5 || video.size(1) != 3) {
    throw Error(where + ": the VAE encodes RGB video [B, 3, T, H, W]");
  }
  if (video.size(2) % kVaeTemporalFactor != 1) {
    throw Error("Video T must satisfy T % 4 == 1 (" + where +
                ", T = " + std::to_string(video.size(2)) + ")");
  }
  if (video.size(3) % kVaeSpatialFactor != 0 || video.size(4) % kVaeSpatialFactor != 0) {
    throw Error("Video spatial dims must be multiples of 16 (" + where + ", H x W = " +
                std::to_string(video.size(3)) + " x " + std::to_string(video.size(4)) + ")");
  }
}

namespace {

// Convolution over time that sees only the current and past frames: time is zero-padded on the past
// side, space on both sides.
class CausalConv3dImpl : public torch::nn::Module {
 public:
  CausalConv3dImpl(int64_t in, int64_t out, int64_t kernel) : time_pad_(kernel - 1) {
    conv_ = register_module(
        "conv",
        torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, kernel)
                              .padding(torch::ExpandingArray<3>({0, kernel / 2, kernel / 2}))));
  }
  at::Tensor forward(const at::Tensor& x) {
    return conv_(torch::constant_pad_nd(x, {0, 0, 0, 0, time_pad_, 0}));
  }

 private:
  int64_t time_pad_;
  torch::nn::Conv3d conv_{nullptr};
};
TORCH_MODULE(CausalConv3d);

// x + conv(silu(x)), causal in time.
class ResidualBlockImpl : public torch::nn::Module {
 public:
  explicit ResidualBlockImpl(int64_t channels) {
    conv_ = register_module("conv", CausalConv3d(channels, channels, 3));
  }
  at::Tensor forward(const at::Tensor& x) { return x + conv_(torch::silu(x)); }

 private:
  CausalConv3d conv_{nullptr};
};
TORCH_MODULE(ResidualBlock);

// Halves T = 1 + 2k to 1 + k causally: the first frame passes alone, later frames are merged in
// pairs (as Wan2.2 keeps the first frame as its own latent frame).
class TemporalDownsampleImpl : public torch::nn::Module {
 public:
  explicit TemporalDownsampleImpl(int64_t channels) {
    merge_ = register_module(
        "merge", torch::nn::Conv3d(torch::nn::Conv3dOptions(channels, channels, {2, 1, 1})
                                       .stride(torch::ExpandingArray<3>({2, 1, 1}))));
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t frames = x.size(2);
    if (frames == 1) return x;
    return torch::cat({x.narrow(2, 0, 1), merge_(x.narrow(2, 1, frames - 1))}, 2);
  }

 private:
  torch::nn::Conv3d merge_{nullptr};
};
TORCH_MODULE(TemporalDownsample);

torch::nn::Conv3d spatial_downsample(int64_t in, int64_t out) {
  return torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, {1, 3, 3})
                               .stride(torch::ExpandingArray<3>({1, 2, 2}))
                               .padding(torch::ExpandingArray<3>({0, 1, 1})));
}

class CausalVideoEncoderImpl : public torch::nn::Module {
 public:
  explicit CausalVideoEncoderImpl(int64_t width) {
    stem_ = register_module("stem", CausalConv3d(3 * 4, width, 3));
    down1_ = register_module("down1", spatial_downsample(width, 2 * width));
    time1_ = register_module("time1", TemporalDownsample(2 * width));
    block1_ = register_module("block1", ResidualBlock(2 * width));
    down2_ = register_module("down2", spatial_downsample(2 * width, 4 * width));
    time2_ = register_module("time2", TemporalDownsample(4 * width));
    block2_ = register_module("block2", ResidualBlock(4 * width));
    down3_ = register_module("down3", spatial_downsample(4 * width, 4 * width));
    block3_ = register_module("block3", ResidualBlock(4 * width));
    head_ = register_module("head", CausalConv3d(4 * width, 2 * kVaeLatentChannels, 3));
  }

  at::Tensor forward(const at::Tensor& video) {
    // Space-to-depth 2x2 (Wan2.2's patchify): [B, 3, T, H, W] -> [B, 12, T, H/2, W/2].
    const int64_t b = video.size(0), t = video.size(2), h = video.size(3), w = video.size(4);
    at::Tensor x = video.reshape({b, 3, t, h / 2, 2, w / 2, 2})
                       .permute({0, 1, 4, 6, 2, 3, 5})
                       .reshape({b, 12, t, h / 2, w / 2});
    x = stem_(x);
    x = block1_(time1_(down1_(torch::silu(x))));
    x = block2_(time2_(down2_(torch::silu(x))));
    x = block3_(down3_(torch::silu(x)));
    return head_(torch::silu(x)).narrow(1, 0, kVaeLatentChannels);  // the mean; log-var unused
  }

 private:
  CausalConv3d stem_{nullptr}, head_{nullptr};
  torch::nn::Conv3d down1_{nullptr}, down2_{nullptr}, down3_{nullptr};
  TemporalDownsample time1_{nullptr}, time2_{nullptr};
  ResidualBlock block1_{nullptr}, block2_{nullptr}, block3_{nullptr};
};
TORCH_MODULE(CausalVideoEncoder);

class BuiltinVae final : public VaeEncoder {
 public:
  BuiltinVae(int64_t width, uint64_t seed, const EncoderPlacement& placement)
      : placement_(placement), module_(width) {
    init_frozen(*module_, seed, placement);
  }
  at::Tensor encode(const at::Tensor& video) override {
    torch::NoGradGuard no_grad;
    return module_->forward(video.to(placement_.device, placement_.dtype));
  }

 private:
  EncoderPlacement placement_;
  CausalVideoEncoder module_;
};

class ScriptedVae final : public VaeEncoder {
 public:
  ScriptedVae(std::string path, const EncoderPlacement& placement)
      : path_(std::move(path)),
        placement_(placement),
        module_(load_frozen_script(path_, "VaeEncode", placement)) {
    encode(torch::zeros({1, 3, 5, 64, 64}));  // probe: rejects a wrong output shape now
  }
  at::Tensor encode(const at::Tensor& video) override {
    torch::NoGradGuard no_grad;
    at::Tensor latents = call_script(module_, {video.to(placement_.device, placement_.dtype)},
                                     "TorchScript VAE", path_);
    const std::vector<int64_t> expected = vae_latent_shape(video.sizes());
    if (latents.sizes() != at::IntArrayRef(expected)) {
      throw Error("TorchScript VAE " + path_ + ": for a video " + shape_string(video.sizes()) +
                  " expected latents [B, 48, (T-1)/4+1, H/16, W/16] = " + shape_string(expected) +
                  ", got " + shape_string(latents.sizes()) +
                  "; export an encoder whose forward(video) returns the latent mean");
    }
    return latents;
  }

 private:
  std::string path_;
  EncoderPlacement placement_;
  torch::jit::Module module_;
};

}  // namespace

std::unique_ptr<VaeEncoder> make_builtin_vae(int64_t width, uint64_t seed,
                                             const EncoderPlacement& placement) {
  return std::make_unique<BuiltinVae>(width, seed, placement);
}

std::unique_ptr<VaeEncoder> load_torchscript_vae(const std::string& path,
                                                 const EncoderPlacement& placement) {
  return std::make_unique<ScriptedVae>(path, placement);
}

}  // namespace wam::models
