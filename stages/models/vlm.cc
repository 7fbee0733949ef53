#include "models/vlm.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <tuple>

#include "wam/error.h"

namespace wam::models {

std::string format_vlm_prompt(const std::string& task, const std::vector<std::string>& view_names) {
  std::string views;
  for (size_t i = 0; i < view_names.size(); ++i) views += (i ? ", " : "") + view_names[i];
  return "Task: " + task + "\nObservations:\n- Frame 1: Current observation; views=" + views +
         ".\nInput Images: " + std::to_string(view_names.size()) +
         "; ordered by temporal frame, then camera view.\nOutput: Given the current multi-camera "
         "observation and task instruction, represent the task-relevant visual state needed to "
         "choose the next action.";
}

std::vector<int64_t> tokenize_words(const std::string& text, int64_t vocab_size) {
  const uint64_t word_ids = static_cast<uint64_t>(vocab_size - kFirstWordToken);
  auto word_token = [&](std::string_view word) {
    uint64_t hash = 1469598103934665603ull;  // FNV-1a, 64 bit
    for (unsigned char c : word) hash = (hash ^ c) * 1099511628211ull;
    return kFirstWordToken + static_cast<int64_t>(hash % word_ids);
  };
  auto is_word_byte = [](unsigned char c) { return std::isalnum(c) || c >= 0x80; };
  std::vector<int64_t> ids = {kBeginToken};
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (is_word_byte(c)) {
      size_t end = i;
      while (end < text.size() && is_word_byte(static_cast<unsigned char>(text[end]))) ++end;
      ids.push_back(word_token(std::string_view(text).substr(i, end - i)));
      i = end;
    } else {
      if (c == '\n' || !std::isspace(c))
        ids.push_back(word_token(std::string_view(text).substr(i, 1)));
      ++i;
    }
  }
  ids.push_back(kEndToken);
  return ids;
}

std::pair<int64_t, int64_t> fit_image_size(int64_t height, int64_t width, int64_t max_pixels,
                                           int64_t factor) {
  auto round_to = [&](double v) {
    return std::max(factor, static_cast<int64_t>(std::llround(v / factor)) * factor);
  };
  auto floor_to = [&](double v) {
    return std::max(factor, static_cast<int64_t>(std::floor(v / factor)) * factor);
  };
  int64_t h = round_to(double(height)), w = round_to(double(width));
  if (h * w > max_pixels) {
    const double beta = std::sqrt(double(height) * double(width) / double(max_pixels));
    h = floor_to(height / beta);
    w = floor_to(width / beta);
  }
  return {h, w};
}

struct BuiltinVlm::Modules : torch::nn::Module {
  explicit Modules(const VlmConfig& c) {
    patch_embed = register_module(
        "patch_embed",
        torch::nn::Conv2d(torch::nn::Conv2dOptions(3, c.width, c.patch_size).stride(c.patch_size)));
    vision_block = register_module("vision_block", EncoderBlock(c.width, c.heads));
    token_embed = register_module("token_embed", torch::nn::Embedding(c.vocab_size, c.width));
    for (int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(
          register_module("layer" + std::to_string(i), EncoderBlock(c.width, c.heads)));
    }
    final_norm = register_module("final_norm", RMSNorm(c.width));
  }
  torch::nn::Conv2d patch_embed{nullptr};
  EncoderBlock vision_block{nullptr};
  torch::nn::Embedding token_embed{nullptr};
  std::vector<EncoderBlock> layers;
  RMSNorm final_norm{nullptr};
};

BuiltinVlm::BuiltinVlm(const VlmConfig& config, uint64_t seed, const EncoderPlacement& placement)
    : config_(config), placement_(placement), modules_(std::make_unique<Modules>(config)) {
  init_frozen(*modules_, seed, placement);
}

BuiltinVlm::~BuiltinVlm() = default;

VisionMetadata BuiltinVlm::vision_metadata(int64_t images, int64_t grid_h, int64_t grid_w) const {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(placement_.device);
  const int64_t patches = grid_h * grid_w;
  VisionMetadata m;
  m.images = images;
  m.grid_h = grid_h;
  m.grid_w = grid_w;
  m.cu_seqlens = torch::arange(0, images + 1, longs) * patches;

  const at::Tensor token = torch::arange(0, images * patches, longs);
  const at::Tensor image =
      torch::bucketize(token, m.cu_seqlens.narrow(0, 1, images), /*out_int32=*/false,
                       /*right=*/true);
  const at::Tensor same_image = image.unsqueeze(1) == image.unsqueeze(0);
  m.vision_bias =
      torch::zeros({images * patches, images * patches}, longs.dtype(at::kFloat))
          .masked_fill(same_image.logical_not(), -std::numeric_limits<float>::infinity())
          .view({1, 1, images * patches, images * patches});

  const at::Tensor within = token - image * patches;
  const at::Tensor row = torch::div(within, grid_w, "floor");
  const at::Tensor column = within - row * grid_w;
  std::tie(m.vision_cos, m.vision_sin) = rope_tables(
      torch::stack({torch::zeros_like(row), row, column}), config_.width / config_.heads);

  // As Qwen-VL's get_rope_index: each image starts after the previous one's largest position.
  const int64_t span = std::max(grid_h, grid_w);
  const at::Tensor start = image * span;
  m.image_positions = torch::stack({start, start + row, start + column});
  m.text_position_start = images * span;
  return m;
}

at::Tensor BuiltinVlm::encode(const at::Tensor& images, const at::Tensor& token_ids,
                              const VisionMetadata& metadata) {
  torch::NoGradGuard no_grad;
  const int64_t batch = token_ids.size(0), length = token_ids.size(1);
  const int64_t image_tokens = metadata.tokens();
  at::Tensor patches = modules_->patch_embed(images).flatten(2).transpose(1, 2);
  patches = patches.reshape({batch, image_tokens, config_.width});
  patches = modules_->vision_block(patches, metadata.vision_cos, metadata.vision_sin,
                                   metadata.vision_bias);

  const at::Tensor ids = token_ids.to(placement_.device);
  at::Tensor x = torch::cat({patches, modules_->token_embed(ids)}, 1);
  const int64_t total = image_tokens + length;
  const at::Tensor text_positions =
      torch::arange(metadata.text_position_start, metadata.text_position_start + length,
                    metadata.image_positions.options())
          .expand({3, length});
  const auto [cos, sin] = rope_tables(torch::cat({metadata.image_positions, text_positions}, 1),
                                      config_.width / config_.heads);
  const at::Tensor valid = torch::cat(
      {torch::ones({batch, image_tokens}, ids.options().dtype(at::kBool)), ids != kPadToken}, 1);
  const at::Tensor causal = torch::full({total, total}, -std::numeric_limits<float>::infinity(),
                                        ids.options().dtype(at::kFloat))
                                .triu(1);
  const at::Tensor bias = causal + key_padding_bias(valid, at::kFloat);
  for (auto& layer : modules_->layers) x = layer(x, cos, sin, bias);
  return modules_->final_norm(x);
}

ScriptedVlm::ScriptedVlm(std::string path, int64_t width, const EncoderPlacement& placement)
    : path_(std::move(path)),
      width_(width),
      placement_(placement),
      module_(load_frozen_script(path_, "VlmEncode", placement)) {
  encode(torch::zeros({2, 3, 112, 112}), torch::arange(1, 9, at::kLong).view({1, 8}));
}

at::Tensor ScriptedVlm::encode(const at::Tensor& images, const at::Tensor& token_ids) {
  torch::NoGradGuard no_grad;
  const at::Tensor hidden = call_script(
      module_, {images.to(placement_.device, placement_.dtype), token_ids.to(placement_.device)},
      "TorchScript VLM", path_);
  const int64_t batch = token_ids.size(0), length = token_ids.size(1);
  if (hidden.dim() != 3 || hidden.size(0) != batch || hidden.size(1) < length ||
      hidden.size(2) != width_) {
    throw Error("TorchScript VLM " + path_ + ": for images " + shape_string(images.sizes()) +
                " and token_ids " + shape_string(token_ids.sizes()) +
                " expected hidden states [B, S >= L, width] = [" + std::to_string(batch) +
                ", S >= " + std::to_string(length) + ", " + std::to_string(width_) + "], got " +
                shape_string(hidden.sizes()) +
                "; export a module whose forward(images, token_ids) returns the last hidden "
                "states (image tokens first, then one row per token id) and set param width");
  }
  return hidden;
}

}  // namespace wam::models
