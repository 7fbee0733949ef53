// VaeEncode: the frozen video VAE over a batch (after Collate). The window is encoded in one call,
// the anchor and recent memory frames together in a second one (2B single frames), as the
// reference's cache generation does. The anchor is the episode's first frame, so a batch drawn
// from one episode repeats it: when every anchor row is bytewise identical
// (deduplicate_identical_anchor_batch), one row is encoded and its latent expanded to the batch
// (a stride-0 view), counted as deduplicated_anchor_batches.
// Reads:  video (float [B, 3, T, H, W], T % 4 == 1, H and W multiples of 16, in [-1, 1]),
//         memory_video_anchor, memory_video_recent (float [B, 3, 1, H, W])
// Writes: video_latents [B, 48, (T-1)/4+1, H/16, W/16], memory_video_anchor_latents and
//         memory_video_recent_latents [B, 48, 1, H/16, W/16] (the encoder's device and dtype)
// On the CPU the encoder's activations are host memory: a batch is encoded in chunks of rows
// sized by the run's host memory budget (wam/host_memory.h), the same latents in more calls.
// Example: {"id": "vae", "type": "VaeEncode", "inputs": ["collate"],
//           "params": {"encoder": "torchscript", "path": "${WAM_CACHE_ROOT}/wan22_vae.pt"}}
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "encode/vae_encode_params.h"
#include "models/vae.h"
#include "wam/host_memory.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

// Whether every row (dim 0) of `t` has the same bytes as row 0. Compared as integers of the
// element's width: the same bytes give the same latents, whereas float equality would take -0.0 for
// 0.0 and never match a NaN.
bool rows_bitwise_identical(const at::Tensor& t) {
  static const std::map<size_t, at::ScalarType> kIntegerOfWidth = {
      {1, at::kByte}, {2, at::kShort}, {4, at::kInt}, {8, at::kLong}};
  const at::Tensor bits = t.view(kIntegerOfWidth.at(t.element_size()));
  return at::equal(bits, bits.narrow(0, 0, 1).expand_as(bits));
}

// The encoders would take uint8 levels for floats 0..255 without a word.
void check_float_video(const at::Tensor& video, const std::string& field) {
  if (video.is_floating_point()) return;
  throw Error("field \"" + field + "\" is " + describe_tensor(video) +
              ": VaeEncode takes float video in [-1, 1]. uint8 levels (Augment's video_dtype: "
              "uint8) become float in HostToDevice: put one before VaeEncode, or set Augment's "
              "video_dtype to float32");
}

class VaeEncodeStage final : public Stage {
 public:
  static constexpr std::string_view kType = "VaeEncode";
  static constexpr std::string_view kSummary =
      "Frozen video VAE (Wan2.2 shape: 48 channels, 16x spatial, 4x causal temporal) over a batch.";
  using Params = VaeEncodeParams;

  explicit VaeEncodeStage(Params params) : params_(std::move(params)) {}

  void declare(Contract& contract) const override {
    for (const char* field : {"video", "memory_video_anchor", "memory_video_recent"}) {
      contract.reads(field, FieldType::kTensor);
      contract.writes(std::string(field) + "_latents", FieldType::kTensor);
    }
    contract.concurrency(Concurrency::serial());
  }

  void open(Context& context) override {
    const models::EncoderPlacement placement =
        models::resolve_placement(params_.device, params_.dtype, context.settings(), "VaeEncode");
    const models::BuiltinWeights weights{static_cast<uint64_t>(params_.seed), params_.weights};
    if (params_.encoder != "builtin") {
      encoder_ = models::load_exported_vae(params_.encoder, params_.path, placement);
    } else if (params_.architecture == "wan22") {
      encoder_ = models::make_wan22_vae(params_.width, params_.width_multipliers,
                                        params_.res_blocks, weights, placement);
    } else {
      encoder_ = models::make_builtin_vae(params_.width, weights, placement);
    }
    deduplicated_anchor_batches_ = &context.counter("deduplicated_anchor_batches");
    if (placement.device.is_cpu()) {
      budget_ = context.host_memory();
      element_bytes_ = static_cast<int64_t>(c10::elementSize(placement.dtype));
    }
    context.log("VaeEncode: " + params_.encoder + " encoder on " + placement.device.str() + " (" +
                params_.dtype + ")");
  }

  void process(Sample batch, Emitter& out) override {
    const at::Tensor& video = batch.tensor("video");
    const at::Tensor& anchor = batch.tensor("memory_video_anchor");
    const at::Tensor& recent = batch.tensor("memory_video_recent");
    check_float_video(video, "video");
    check_float_video(anchor, "memory_video_anchor");
    check_float_video(recent, "memory_video_recent");
    models::check_vae_input(video, "video");
    models::check_vae_input(anchor, "memory_video_anchor");
    models::check_vae_input(recent, "memory_video_recent");
    if (anchor.sizes() != recent.sizes()) {
      throw Error("field \"memory_video_anchor\" is " + describe_tensor(anchor) +
                  " but \"memory_video_recent\" is " + describe_tensor(recent) +
                  "; the memory frames are encoded together and must have one shape");
    }
    std::call_once(claimed_, [&] { claim_memory(video); });
    batch.set_tensor("video_latents", encode_in_chunks(video));
    const int64_t rows = anchor.size(0);
    const bool one_anchor =
        params_.deduplicate_identical_anchor_batch && rows > 1 && rows_bitwise_identical(anchor);
    const int64_t anchor_rows = one_anchor ? 1 : rows;
    const at::Tensor memory_latents =
        encode_in_chunks(torch::cat({anchor.narrow(0, 0, anchor_rows), recent}, 0));
    at::Tensor anchor_latents = memory_latents.narrow(0, 0, anchor_rows);
    if (one_anchor) {
      std::vector<int64_t> sizes = anchor_latents.sizes().vec();
      sizes[0] = rows;
      anchor_latents = anchor_latents.expand(sizes);
      deduplicated_anchor_batches_->add();
    }
    batch.set_tensor("memory_video_anchor_latents", anchor_latents);
    batch.set_tensor("memory_video_recent_latents", memory_latents.narrow(0, anchor_rows, rows));
    out.emit(std::move(batch));
  }

 private:
  // Frames [T, H, W] the encoder may hold at once on the CPU, claimed from the budget with the
  // first batch. A frame's activations: about 2 x width values a pixel, measured for the built-in
  // encoder of the default width 32 (cache generate peaked 2.3 GiB higher encoding 16 rows of 9
  // frames at 384x256 a call than 4: 58 values a pixel, LibTorch's CPU conv3d unfolding its
  // input; docs/BENCHMARKS.md, "Host memory of cache generate"). TorchScript encoders are priced
  // the same (their width is not known).
  void claim_memory(const at::Tensor& video) {
    if (!budget_) return;
    const int64_t frames = video.size(0) * video.size(2);
    const int64_t frame_bytes = video.size(3) * video.size(4) * element_bytes_ * 2 * params_.width;
    chunk_frames_ =
        budget_->claim("VAE frames encoded at once", frame_bytes, frames, video.size(2));
  }

  // The encoder over `video` [B, 3, T, H, W], in chunks of rows holding at most chunk_frames_
  // frames (at least a row).
  at::Tensor encode_in_chunks(const at::Tensor& video) {
    const int64_t rows = video.size(0);
    const int64_t chunk =
        chunk_frames_ > 0 ? std::max<int64_t>(1, chunk_frames_ / video.size(2)) : rows;
    if (chunk >= rows) return encoder_->encode(video);
    std::vector<at::Tensor> parts;
    for (int64_t row = 0; row < rows; row += chunk) {
      parts.push_back(encoder_->encode(video.narrow(0, row, std::min(chunk, rows - row))));
    }
    return torch::cat(parts, 0);
  }

  Params params_;
  std::unique_ptr<models::VaeEncoder> encoder_;
  Counter* deduplicated_anchor_batches_ = nullptr;
  HostMemoryBudget* budget_ = nullptr;  // null on a device: its activations are not host memory
  int64_t element_bytes_ = 4;
  std::once_flag claimed_;
  int64_t chunk_frames_ = 0;  // 0: the whole batch at once
};

WAM_REGISTER_STAGE(VaeEncodeStage);

}  // namespace
}  // namespace wam::stages
