// The frozen vision-language model whose last hidden states feed the action expert's cross-
// attention. The reference uses a 2B Qwen-VL-style model (RynnBrain); here a built-in stand-in
// with that structure (patch embedding of each camera image, a vision block attending within each
// image, multimodal RoPE, a causal language transformer over [image tokens, prompt tokens]) and
// seeded random weights, or a user's TorchScript export.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/frozen_encoder.h"
#include "models/vlm_config.h"

namespace wam::models {

inline constexpr int64_t kPadToken = 0;
inline constexpr int64_t kBeginToken = 1;
inline constexpr int64_t kEndToken = 2;
inline constexpr int64_t kFirstWordToken = 3;

// The reference's chat prompt for one frame of `view_names.size()` camera images:
//   Task: <task>
//   Observations:
//   - Frame 1: Current observation; views=<view names joined by ", ">.
//   Input Images: <N>; ordered by temporal frame, then camera view.
//   Output: Given the current multi-camera observation and task instruction, represent the
//   task-relevant visual state needed to choose the next action.
std::string format_vlm_prompt(const std::string& task, const std::vector<std::string>& view_names);

// Deterministic word-level tokenizer (no vocabulary file): kBeginToken, then one id per word (a
// run of letters, digits or non-ASCII bytes) or punctuation character or newline, hashed (FNV-1a)
// into [kFirstWordToken, vocab_size), then kEndToken. Other whitespace separates words.
std::vector<int64_t> tokenize_words(const std::string& text, int64_t vocab_size);

// Qwen-VL's smart resize: the size nearest to height x width whose sides are multiples of
// `factor`, scaled down keeping the aspect ratio when it has more than `max_pixels` pixels.
// Returns {height, width}.
std::pair<int64_t, int64_t> fit_image_size(int64_t height, int64_t width, int64_t max_pixels,
                                           int64_t factor);

// What depends only on the image grid (images per sample, patch rows and columns): computed once
// per grid when metadata reuse is on, as the reference caches its rope indices and vision
// metadata. Tensors live on the model's device.
struct VisionMetadata {
  int64_t images = 0, grid_h = 0, grid_w = 0;
  int64_t merge = 1;                  // patches merged per side into one language token
  at::Tensor cu_seqlens;              // int64 [images + 1]: where each image's patches start
  at::Tensor vision_bias;             // compact: float [1, 1, N, N], 0 within an image, -inf
                                      // across; qwen3_vl: 0 (each image attends on its own)
  at::Tensor vision_cos, vision_sin;  // [patches of one sample or image, vision head_dim / 2]:
                                      // RoPE over (0, row, column)
  at::Tensor image_positions;         // int64 [3, tokens()]: language-model RoPE positions
  int64_t text_position_start = 0;    // first text position (after the last image)

  // Language tokens of the images (patches, or merged groups of patches).
  int64_t tokens() const { return images * (grid_h / merge) * (grid_w / merge); }
};

class BuiltinVlm {
 public:
  BuiltinVlm(const VlmConfig& config, const BuiltinWeights& weights,
             const EncoderPlacement& placement);
  ~BuiltinVlm();

  const VlmConfig& config() const { return config_; }
  int64_t parameter_count() const;
  const EncoderPlacement& placement() const { return placement_; }

  VisionMetadata vision_metadata(int64_t images, int64_t grid_h, int64_t grid_w) const;

  // images: float [B * images, 3, h, w] in [0, 1] on the model's placement, h and w multiples of
  // patch_size; token_ids: int64 [B, L] right-padded with kPadToken. Returns the last hidden
  // states [B, images * grid + L, width]. No token attends to padding; rows of padding tokens
  // carry no meaning (VlmEncode zeroes them).
  at::Tensor encode(const at::Tensor& images, const at::Tensor& token_ids,
                    const VisionMetadata& metadata);

 private:
  struct Modules;
  struct Qwen3Modules;
  at::Tensor encode_qwen3(const at::Tensor& images, const at::Tensor& token_ids,
                          const VisionMetadata& metadata);
  VlmConfig config_;
  EncoderPlacement placement_;
  std::unique_ptr<Modules> modules_;
  std::unique_ptr<Qwen3Modules> qwen3_;
};

// An exported VLM (load_exported_module: encoder "torchscript" or "aoti"): forward(images float [B
// * V, 3, h, w] in [0, 1], token_ids int64 [B, L] right-padded with 0) -> last hidden states [B, S,
// width] with S >= L, laid out as the built-in's: S - L image tokens first (all valid), then one
// row per token id (valid where the id is not 0). Checked at load with a probe (images [2, 3, 112,
// 112], token_ids [1, 8]).
class ExportedVlm {
 public:
  ExportedVlm(const std::string& encoder, std::string path, int64_t width,
              const EncoderPlacement& placement);
  at::Tensor encode(const at::Tensor& images, const at::Tensor& token_ids);

 private:
  std::string path_;
  int64_t width_;
  EncoderPlacement placement_;
  std::unique_ptr<ExportedModule> module_;
};

}  // namespace wam::models
