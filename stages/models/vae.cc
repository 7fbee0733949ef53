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

// ---- Wan2.2's encoder (make_wan22_vae) ---------------------------------------------------------

// What each causal convolution carries from one temporal chunk to the next, in call order (the
// order is the same for every chunk, as in Wan's feat_cache / feat_idx).
struct ChunkCache {
  std::vector<at::Tensor> slots;
  size_t next = 0;
  at::Tensor& slot() {
    if (next == slots.size()) slots.emplace_back();
    return slots[next++];
  }
};

// Wan's RMS_norm over channels (dim 1): x / |x| * sqrt(C) * gamma.
class ChannelRmsNormImpl : public torch::nn::Module {
 public:
  explicit ChannelRmsNormImpl(int64_t channels) : scale_(std::sqrt(double(channels))) {
    gamma_ = register_parameter("gamma", torch::ones({channels}));
  }
  at::Tensor forward(const at::Tensor& x) {
    std::vector<int64_t> shape(x.dim(), 1);
    shape[1] = gamma_.size(0);
    return torch::nn::functional::normalize(x,
                                            torch::nn::functional::NormalizeFuncOptions().dim(1)) *
           scale_ * gamma_.view(shape);
  }

 private:
  double scale_;
  at::Tensor gamma_;
};
TORCH_MODULE(ChannelRmsNorm);

// A causal convolution (kernel 3 or 1) run chunk by chunk: the frames before the chunk come from
// the cache (zeros before the first chunk), so the chunks together give the whole sequence's
// result.
class CachedCausalConvImpl : public torch::nn::Module {
 public:
  CachedCausalConvImpl(int64_t in, int64_t out, int64_t kernel) : past_(kernel - 1) {
    conv_ = register_module(
        "conv",
        torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, kernel)
                              .padding(torch::ExpandingArray<3>({0, kernel / 2, kernel / 2}))));
  }
  at::Tensor forward(const at::Tensor& x, ChunkCache& cache) {
    if (past_ == 0) return conv_(x);
    at::Tensor& slot = cache.slot();
    const at::Tensor joined = slot.defined() ? torch::cat({slot, x}, 2) : x;
    const int64_t kept = std::min<int64_t>(past_, joined.size(2));
    slot = joined.narrow(2, joined.size(2) - kept, kept);
    const int64_t zeros = past_ - (joined.size(2) - x.size(2));
    return conv_(torch::constant_pad_nd(joined, {0, 0, 0, 0, zeros, 0}));
  }

 private:
  int64_t past_;
  torch::nn::Conv3d conv_{nullptr};
};
TORCH_MODULE(CachedCausalConv);

class WanResidualBlockImpl : public torch::nn::Module {
 public:
  WanResidualBlockImpl(int64_t in, int64_t out) {
    norm1_ = register_module("norm1", ChannelRmsNorm(in));
    conv1_ = register_module("conv1", CachedCausalConv(in, out, 3));
    norm2_ = register_module("norm2", ChannelRmsNorm(out));
    conv2_ = register_module("conv2", CachedCausalConv(out, out, 3));
    if (in != out) shortcut_ = register_module("shortcut", CachedCausalConv(in, out, 1));
  }
  at::Tensor forward(const at::Tensor& x, ChunkCache& cache) {
    const at::Tensor h = shortcut_ ? shortcut_->forward(x, cache) : x;
    at::Tensor y = conv1_(torch::silu(norm1_(x)), cache);
    y = conv2_(torch::silu(norm2_(y)), cache);
    return y + h;
  }

 private:
  ChannelRmsNorm norm1_{nullptr}, norm2_{nullptr};
  CachedCausalConv conv1_{nullptr}, conv2_{nullptr}, shortcut_{nullptr};
};
TORCH_MODULE(WanResidualBlock);

// Wan's AvgDown3D: a parameter-free shortcut that folds factor_t x 2 x 2 neighbours into channels
// (the time axis front-padded to a multiple of factor_t) and averages them in groups down to `out`.
at::Tensor average_down(const at::Tensor& input, int64_t out, int64_t factor_t, int64_t factor_s) {
  const int64_t pad_t = (factor_t - input.size(2) % factor_t) % factor_t;
  const at::Tensor x = torch::constant_pad_nd(input, {0, 0, 0, 0, pad_t, 0});
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  const int64_t factor = factor_t * factor_s * factor_s;
  return x.reshape({b, c, t / factor_t, factor_t, h / factor_s, factor_s, w / factor_s, factor_s})
      .permute({0, 1, 3, 5, 7, 2, 4, 6})
      .reshape({b, out, c * factor / out, t / factor_t, h / factor_s, w / factor_s})
      .mean(2);
}

// One level: residual blocks, then (but in the last level) a 2x spatial downsampling (zero pad
// right and bottom, 3x3 stride-2 conv per frame) and, where `temporal`, Wan's causal 2x time
// downsampling: the first chunk's frame passes alone, later frames are convolved (kernel 3,
// stride 2) after the previous chunk's last frame.
class DownLevelImpl : public torch::nn::Module {
 public:
  DownLevelImpl(int64_t in, int64_t out, int64_t blocks, bool spatial, bool temporal)
      : out_(out), spatial_(spatial), temporal_(temporal) {
    for (int64_t i = 0; i < blocks; ++i) {
      blocks_.push_back(
          register_module("block" + std::to_string(i), WanResidualBlock(i == 0 ? in : out, out)));
    }
    if (spatial) {
      resample_ = register_module(
          "resample", torch::nn::Conv3d(torch::nn::Conv3dOptions(out, out, {1, 3, 3})
                                            .stride(torch::ExpandingArray<3>({1, 2, 2}))));
    }
    if (temporal) {
      time_conv_ = register_module(
          "time_conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(out, out, {3, 1, 1})
                                             .stride(torch::ExpandingArray<3>({2, 1, 1}))));
    }
  }
  at::Tensor forward(const at::Tensor& input, ChunkCache& cache) {
    at::Tensor x = input;
    for (auto& block : blocks_) x = block(x, cache);
    if (!spatial_) return x + average_down(input, out_, 1, 1);
    x = resample_(torch::constant_pad_nd(x, {0, 1, 0, 1}));
    if (temporal_) {
      at::Tensor& slot = cache.slot();
      at::Tensor last = x.narrow(2, x.size(2) - 1, 1);
      if (slot.defined()) {
        x = time_conv_(torch::cat({slot, x}, 2));
      }
      slot = std::move(last);
    }
    return x + average_down(input, out_, temporal_ ? 2 : 1, 2);
  }

 private:
  int64_t out_;
  bool spatial_, temporal_;
  std::vector<WanResidualBlock> blocks_;
  torch::nn::Conv3d resample_{nullptr}, time_conv_{nullptr};
};
TORCH_MODULE(DownLevel);

// Single-head self-attention over the pixels of each frame.
class FrameAttentionImpl : public torch::nn::Module {
 public:
  explicit FrameAttentionImpl(int64_t channels) {
    norm_ = register_module("norm", ChannelRmsNorm(channels));
    qkv_ = register_module("qkv",
                           torch::nn::Conv3d(torch::nn::Conv3dOptions(channels, 3 * channels, 1)));
    proj_ =
        register_module("proj", torch::nn::Conv3d(torch::nn::Conv3dOptions(channels, channels, 1)));
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
    const auto qkv =
        qkv_(norm_(x)).permute({0, 2, 3, 4, 1}).reshape({b * t, h * w, 3 * c}).chunk(3, -1);
    const at::Tensor scores =
        torch::matmul(qkv[0], qkv[1].transpose(1, 2)).to(at::kFloat) / std::sqrt(double(c));
    const at::Tensor attended = torch::matmul(scores.softmax(-1).to(x.scalar_type()), qkv[2]);
    return x + proj_(attended.reshape({b, t, h, w, c}).permute({0, 4, 1, 2, 3}));
  }

 private:
  ChannelRmsNorm norm_{nullptr};
  torch::nn::Conv3d qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(FrameAttention);

class Wan22EncoderImpl : public torch::nn::Module {
 public:
  Wan22EncoderImpl(int64_t width, const std::vector<int64_t>& multipliers, int64_t res_blocks) {
    // Wan2_2_VAE's temporal_downsample [False, True, True]: 4x in time over the first three levels.
    const std::vector<bool> temporal = {false, true, true};
    stem_ = register_module("stem", CachedCausalConv(12, width, 3));
    int64_t in = width;
    for (size_t i = 0; i < multipliers.size(); ++i) {
      const int64_t out = width * multipliers[i];
      const bool last = i + 1 == multipliers.size();
      levels_.push_back(register_module(
          "level" + std::to_string(i),
          DownLevel(in, out, res_blocks, !last, !last && i < temporal.size() && temporal[i])));
      in = out;
    }
    middle1_ = register_module("middle1", WanResidualBlock(in, in));
    attention_ = register_module("attention", FrameAttention(in));
    middle2_ = register_module("middle2", WanResidualBlock(in, in));
    head_norm_ = register_module("head_norm", ChannelRmsNorm(in));
    head_ = register_module("head", CachedCausalConv(in, 2 * kVaeLatentChannels, 3));
    moments_ = register_module("moments",
                               CachedCausalConv(2 * kVaeLatentChannels, 2 * kVaeLatentChannels, 1));
  }

  at::Tensor forward(const at::Tensor& video) {
    const int64_t b = video.size(0), t = video.size(2), h = video.size(3), w = video.size(4);
    const at::Tensor x = video.reshape({b, 3, t, h / 2, 2, w / 2, 2})
                             .permute({0, 1, 6, 4, 2, 3, 5})  // Wan's "(c r q)" channel order
                             .reshape({b, 12, t, h / 2, w / 2});
    ChunkCache cache;
    std::vector<at::Tensor> chunks;
    for (int64_t start = 0; start < t; start += start == 0 ? 1 : kVaeTemporalFactor) {
      cache.next = 0;
      const int64_t frames = start == 0 ? 1 : kVaeTemporalFactor;
      chunks.push_back(encode_chunk(x.narrow(2, start, frames), cache));
    }
    const at::Tensor moments = moments_(torch::cat(chunks, 2), cache);
    return moments.narrow(1, 0, kVaeLatentChannels);  // the mean; log-var unused
  }

 private:
  at::Tensor encode_chunk(const at::Tensor& chunk, ChunkCache& cache) {
    at::Tensor x = stem_(chunk, cache);
    for (auto& level : levels_) x = level(x, cache);
    x = middle2_(attention_(middle1_(x, cache)), cache);
    return head_(torch::silu(head_norm_(x)), cache);
  }

  CachedCausalConv stem_{nullptr}, head_{nullptr}, moments_{nullptr};
  std::vector<DownLevel> levels_;
  WanResidualBlock middle1_{nullptr}, middle2_{nullptr};
  FrameAttention attention_{nullptr};
  ChannelRmsNorm head_norm_{nullptr};
};
TORCH_MODULE(Wan22Encoder);

// A built-in stand-in: `Module` (CausalVideoEncoder or Wan22Encoder) with weights drawn from
// `seed`, frozen on `placement`.
template <class Module>
class SeededVae final : public VaeEncoder {
 public:
  SeededVae(Module module, const BuiltinWeights& weights, const EncoderPlacement& placement)
      : placement_(placement), module_(std::move(module)) {
    init_frozen(*module_, weights, placement);
  }
  at::Tensor encode(const at::Tensor& video) override {
    torch::NoGradGuard no_grad;
    return module_->forward(video.to(placement_.device, placement_.dtype));
  }
  int64_t parameter_count() const override { return count_parameters(*module_); }
  std::vector<std::pair<std::string, at::Tensor>> named_weights() const override {
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto& item : module_->named_parameters(/*recurse=*/true)) {
      named.emplace_back(item.key(), item.value());
    }
    return named;
  }

 private:
  EncoderPlacement placement_;
  Module module_;
};

class ExportedVae final : public VaeEncoder {
 public:
  ExportedVae(const std::string& encoder, std::string path, const EncoderPlacement& placement)
      : path_(std::move(path)),
        placement_(placement),
        module_(load_exported_module(encoder, path_, "VaeEncode", placement)),
        single_frame_(encoder == "aoti" ? load_single_frame(path_, placement) : nullptr) {
    // Probes: a wrong output shape is refused now, for several frames and for one (the memory
    // frames).
    encode(torch::zeros({1, 3, 5, 64, 64}));
    encode(torch::zeros({1, 3, 1, 64, 64}));
  }
  at::Tensor encode(const at::Tensor& video) override {
    torch::NoGradGuard no_grad;
    ExportedModule& module = single_frame_ && video.size(2) == 1 ? *single_frame_ : *module_;
    at::Tensor latents = module.call({video.to(placement_.device, placement_.dtype)});
    const std::vector<int64_t> expected = vae_latent_shape(video.sizes());
    if (latents.sizes() != at::IntArrayRef(expected)) {
      throw Error(std::string(module_->kind()) + " VAE " + path_ + ": for a video " +
                  shape_string(video.sizes()) +
                  " expected latents [B, 48, (T-1)/4+1, H/16, W/16] = " + shape_string(expected) +
                  ", got " + shape_string(latents.sizes()) +
                  "; export an encoder whose forward(video) returns the latent mean");
    }
    return latents;
  }
  int64_t parameter_count() const override { return module_->parameter_count(); }

 private:
  // A causal VAE encodes a one-frame video on a branch of its own, which one exported graph cannot
  // hold beside the several-frame one (torch.export keeps the branch its example takes), so a
  // package holds it as a second model (docs/ENCODERS.md, "Exported encoders").
  static std::unique_ptr<ExportedModule> load_single_frame(const std::string& path,
                                                           const EncoderPlacement& placement) {
    try {
      return load_exported_module("aoti", path, "VaeEncode", placement, "single_frame");
    } catch (const Error& e) {
      throw Error("VaeEncode: AOTInductor package " + path +
                  " has no model \"single_frame\" for one-frame videos (the memory frames): "
                  "export it again with scripts/export_encoder.py (" +
                  e.what() + ")");
    }
  }

  std::string path_;
  EncoderPlacement placement_;
  std::unique_ptr<ExportedModule> module_;
  std::unique_ptr<ExportedModule> single_frame_;  // null for TorchScript, which keeps branches
};

}  // namespace

std::unique_ptr<VaeEncoder> make_builtin_vae(int64_t width, const BuiltinWeights& weights,
                                             const EncoderPlacement& placement) {
  return std::make_unique<SeededVae<CausalVideoEncoder>>(CausalVideoEncoder(width), weights,
                                                         placement);
}

std::unique_ptr<VaeEncoder> make_wan22_vae(int64_t width, const std::vector<int64_t>& multipliers,
                                           int64_t res_blocks, const BuiltinWeights& weights,
                                           const EncoderPlacement& placement) {
  if (multipliers.size() != 4) {
    throw Error("VaeEncode: the wan22 encoder needs 4 width multipliers (16x spatial), got " +
                std::to_string(multipliers.size()));
  }
  return std::make_unique<SeededVae<Wan22Encoder>>(Wan22Encoder(width, multipliers, res_blocks),
                                                   weights, placement);
}

std::unique_ptr<VaeEncoder> load_exported_vae(const std::string& encoder, const std::string& path,
                                              const EncoderPlacement& placement) {
  return std::make_unique<ExportedVae>(encoder, path, placement);
}

}  // namespace wam::models
