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

namespace {

// Qwen3-VL's patch merger: spatial_merge x spatial_merge neighbouring patches become one token
// (norm, concatenation, MLP to the language width). The main merger normalises each patch before
// the concatenation, the deepstack mergers the concatenation (Qwen3-VL's use_postshuffle_norm).
class PatchMergerImpl : public torch::nn::Module {
 public:
  PatchMergerImpl(const VlmConfig& c, bool post_shuffle)
      : merge_(c.spatial_merge), post_shuffle_(post_shuffle) {
    const int64_t grouped = c.vision_width * merge_ * merge_;
    norm_ = register_module("norm", RMSNorm(post_shuffle ? grouped : c.vision_width));
    fc1_ = register_module("fc1", torch::nn::Linear(grouped, grouped));
    fc2_ = register_module("fc2", torch::nn::Linear(grouped, c.language_width));
  }
  // x [images, grid_h * grid_w, vision_width] in row-major patch order ->
  // [images, (grid_h / merge) * (grid_w / merge), language_width], row-major over the groups.
  at::Tensor forward(const at::Tensor& x, int64_t grid_h, int64_t grid_w) {
    const int64_t images = x.size(0), width = x.size(2);
    at::Tensor grouped =
        (post_shuffle_ ? x : norm_(x))
            .reshape({images, grid_h / merge_, merge_, grid_w / merge_, merge_, width})
            .permute({0, 1, 3, 2, 4, 5})
            .reshape({images, (grid_h / merge_) * (grid_w / merge_), merge_ * merge_ * width});
    if (post_shuffle_) grouped = norm_(grouped);
    return fc2_(torch::gelu(fc1_(grouped)));
  }

 private:
  int64_t merge_;
  bool post_shuffle_;
  RMSNorm norm_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(PatchMerger);

}  // namespace

struct BuiltinVlm::Qwen3Modules : torch::nn::Module {
  explicit Qwen3Modules(const VlmConfig& c) {
    patch_embed = register_module(
        "patch_embed", torch::nn::Conv2d(torch::nn::Conv2dOptions(3 * c.temporal_patch,
                                                                  c.vision_width, c.patch_size)
                                             .stride(c.patch_size)));
    position_embed = register_parameter(
        "position_embed", torch::zeros({c.position_grid * c.position_grid, c.vision_width}));
    const BlockShape vision{c.vision_width,  c.vision_heads, 0, 0, c.vision_mlp,
                            /*gated=*/false, /*gelu=*/true};
    for (int64_t i = 0; i < c.vision_layers; ++i) {
      vision_blocks.push_back(
          register_module("vision_block" + std::to_string(i), EncoderBlock(vision)));
    }
    merger = register_module("merger", PatchMerger(c, /*post_shuffle=*/false));
    for (size_t i = 0; i < c.deepstack_layers.size(); ++i) {
      deepstack_mergers.push_back(register_module("deepstack_merger" + std::to_string(i),
                                                  PatchMerger(c, /*post_shuffle=*/true)));
    }
    token_embed =
        register_module("token_embed", torch::nn::Embedding(c.vocab_size, c.language_width));
    const BlockShape language{c.language_width, c.heads,        c.kv_heads,      c.head_dim, c.mlp,
                              /*gated=*/true,   /*gelu=*/false, /*qk_norm=*/true};
    for (int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(register_module("layer" + std::to_string(i), EncoderBlock(language)));
    }
    final_norm = register_module("final_norm", RMSNorm(c.language_width));
    if (c.language_width != c.width) {
      project = register_module("project", torch::nn::Linear(c.language_width, c.width));
    }
  }
  torch::nn::Conv2d patch_embed{nullptr};
  at::Tensor position_embed;
  std::vector<EncoderBlock> vision_blocks;
  PatchMerger merger{nullptr};
  std::vector<PatchMerger> deepstack_mergers;
  torch::nn::Embedding token_embed{nullptr};
  std::vector<EncoderBlock> layers;
  RMSNorm final_norm{nullptr};
  torch::nn::Linear project{nullptr};
};

BuiltinVlm::BuiltinVlm(const VlmConfig& config, const BuiltinWeights& weights,
                       const EncoderPlacement& placement)
    : config_(config), placement_(placement) {
  if (config.qwen3()) {
    qwen3_ = std::make_unique<Qwen3Modules>(config);
    init_frozen(*qwen3_, weights, placement);
  } else {
    modules_ = std::make_unique<Modules>(config);
    init_frozen(*modules_, weights, placement);
  }
}

BuiltinVlm::~BuiltinVlm() = default;

int64_t BuiltinVlm::parameter_count() const {
  return qwen3_ ? count_parameters(*qwen3_) : count_parameters(*modules_);
}

namespace {

// Qwen3-VL's layout: each image attends on its own (no bias), its patches' RoPE over (0, row,
// column), and the language model's positions over the merged grid, each image starting after
// the previous one's largest position.
VisionMetadata qwen3_layout(VisionMetadata m, const VlmConfig& c, const at::TensorOptions& longs) {
  m.merge = c.spatial_merge;
  m.cu_seqlens = torch::arange(0, m.images + 1, longs) * (m.grid_h * m.grid_w);
  m.vision_bias = torch::zeros({1, 1, 1, 1}, longs.dtype(at::kFloat));
  const at::Tensor patch = torch::arange(0, m.grid_h * m.grid_w, longs);
  const at::Tensor row = torch::div(patch, m.grid_w, "floor");
  std::tie(m.vision_cos, m.vision_sin) =
      rope_tables(torch::stack({torch::zeros_like(row), row, patch - row * m.grid_w}),
                  c.vision_width / c.vision_heads);
  const int64_t rows = m.grid_h / m.merge, columns = m.grid_w / m.merge;
  const at::Tensor token = torch::arange(0, m.tokens(), longs);
  const at::Tensor image = torch::div(token, rows * columns, "floor");
  const at::Tensor within = token - image * (rows * columns);
  const at::Tensor token_row = torch::div(within, columns, "floor");
  const int64_t span = std::max(rows, columns);
  const at::Tensor start = image * span;
  m.image_positions =
      torch::stack({start, start + token_row, start + within - token_row * columns});
  m.text_position_start = m.images * span;
  return m;
}

// The language model's RoPE tables and attention bias over [image tokens, prompt tokens]: the
// prompt's positions continue after the images' (Qwen-VL's get_rope_index), attention is causal,
// and no token attends to padding. `ids`: int64 [B, L] on the model's device.
struct LanguageAttention {
  at::Tensor cos, sin, bias;
};
LanguageAttention language_attention(const VisionMetadata& metadata, const at::Tensor& ids,
                                     int64_t image_tokens, int64_t head_dim) {
  const int64_t batch = ids.size(0), length = ids.size(1);
  const int64_t total = image_tokens + length;
  const at::Tensor text_positions =
      torch::arange(metadata.text_position_start, metadata.text_position_start + length,
                    metadata.image_positions.options())
          .expand({3, length});
  auto [cos, sin] =
      rope_tables(torch::cat({metadata.image_positions, text_positions}, 1), head_dim);
  const at::Tensor valid = torch::cat(
      {torch::ones({batch, image_tokens}, ids.options().dtype(at::kBool)), ids != kPadToken}, 1);
  const at::Tensor causal = torch::full({total, total}, -std::numeric_limits<float>::infinity(),
                                        ids.options().dtype(at::kFloat))
                                .triu(1);
  return {std::move(cos), std::move(sin), causal + key_padding_bias(valid, at::kFloat)};
}

}  // namespace

VisionMetadata BuiltinVlm::vision_metadata(int64_t images, int64_t grid_h, int64_t grid_w) const {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(placement_.device);
  const int64_t patches = grid_h * grid_w;
  VisionMetadata m;
  m.images = images;
  m.grid_h = grid_h;
  m.grid_w = grid_w;
  if (config_.qwen3()) return qwen3_layout(m, config_, longs);
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
  if (qwen3_) return encode_qwen3(images, token_ids, metadata);
  torch::NoGradGuard no_grad;
  const int64_t batch = token_ids.size(0);
  const int64_t image_tokens = metadata.tokens();
  at::Tensor patches = modules_->patch_embed(images).flatten(2).transpose(1, 2);
  patches = patches.reshape({batch, image_tokens, config_.width});
  patches = modules_->vision_block(patches, metadata.vision_cos, metadata.vision_sin,
                                   metadata.vision_bias);

  const at::Tensor ids = token_ids.to(placement_.device);
  at::Tensor x = torch::cat({patches, modules_->token_embed(ids)}, 1);
  const auto [cos, sin, bias] =
      language_attention(metadata, ids, image_tokens, config_.width / config_.heads);
  for (auto& layer : modules_->layers) x = layer(x, cos, sin, bias);
  return modules_->final_norm(x);
}

at::Tensor BuiltinVlm::encode_qwen3(const at::Tensor& images, const at::Tensor& token_ids,
                                    const VisionMetadata& metadata) {
  torch::NoGradGuard no_grad;
  const VlmConfig& c = config_;
  Qwen3Modules& q = *qwen3_;
  const int64_t batch = token_ids.size(0), length = token_ids.size(1);
  const int64_t grid_h = metadata.grid_h, grid_w = metadata.grid_w;
  // A still image is temporal_patch identical frames, as Qwen-VL's processor repeats it.
  at::Tensor x =
      q.patch_embed(c.temporal_patch > 1 ? images.repeat({1, c.temporal_patch, 1, 1}) : images);
  const at::Tensor grid =
      q.position_embed.view({c.position_grid, c.position_grid, -1}).permute({2, 0, 1}).unsqueeze(0);
  const at::Tensor positions =
      torch::nn::functional::interpolate(grid, torch::nn::functional::InterpolateFuncOptions()
                                                   .size(std::vector<int64_t>{grid_h, grid_w})
                                                   .mode(torch::kBilinear)
                                                   .align_corners(true));
  x = (x + positions).flatten(2).transpose(1, 2);  // [B * V, patches, vision_width]
  std::vector<at::Tensor> deepstack;
  for (int64_t i = 0; i < c.vision_layers; ++i) {
    x = q.vision_blocks[i](x, metadata.vision_cos, metadata.vision_sin, metadata.vision_bias);
    for (size_t d = 0; d < c.deepstack_layers.size(); ++d) {
      if (c.deepstack_layers[d] == i) {
        deepstack.push_back(
            q.deepstack_mergers[d](x, grid_h, grid_w).reshape({batch, -1, c.language_width}));
      }
    }
  }
  const at::Tensor merged = q.merger(x, grid_h, grid_w).reshape({batch, -1, c.language_width});
  const int64_t image_tokens = merged.size(1);

  const at::Tensor ids = token_ids.to(placement_.device);
  at::Tensor h = torch::cat({merged, q.token_embed(ids)}, 1);
  const auto [cos, sin, bias] = language_attention(metadata, ids, image_tokens, c.head_dim);
  for (size_t l = 0; l < q.layers.size(); ++l) {
    h = q.layers[l](h, cos, sin, bias);
    if (l < deepstack.size()) {  // Qwen3-VL's deepstack: vision features into the first layers
      h = torch::cat(
          {h.narrow(1, 0, image_tokens) + deepstack[l], h.narrow(1, image_tokens, length)}, 1);
    }
  }
  h = q.final_norm(h);
  return q.project ? q.project(h) : h;
}

ExportedVlm::ExportedVlm(const std::string& encoder, std::string path, int64_t width,
                         const EncoderPlacement& placement)
    : path_(std::move(path)),
      width_(width),
      placement_(placement),
      module_(load_exported_module(encoder, path_, "VlmEncode", placement)) {
  encode(torch::zeros({2, 3, 112, 112}), torch::arange(1, 9, at::kLong).view({1, 8}));
}

at::Tensor ExportedVlm::encode(const at::Tensor& images, const at::Tensor& token_ids) {
  torch::NoGradGuard no_grad;
  const at::Tensor hidden = module_->call(
      {images.to(placement_.device, placement_.dtype), token_ids.to(placement_.device)});
  const int64_t batch = token_ids.size(0), length = token_ids.size(1);
  if (hidden.dim() != 3 || hidden.size(0) != batch || hidden.size(1) < length ||
      hidden.size(2) != width_) {
    throw Error(std::string(module_->kind()) + " VLM " + path_ + ": for images " +
                shape_string(images.sizes()) + " and token_ids " + shape_string(token_ids.sizes()) +
                " expected hidden states [B, S >= L, width] = [" + std::to_string(batch) +
                ", S >= " + std::to_string(length) + ", " + std::to_string(width_) + "], got " +
                shape_string(hidden.sizes()) +
                "; export a module whose forward(images, token_ids) returns the last hidden "
                "states (image tokens first, then one row per token id) and set param width");
  }
  return hidden;
}

}  // namespace wam::models
