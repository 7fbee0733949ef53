// VlmEncode: the frozen vision-language model over a batch (after Collate). Each camera's current
// frame is scaled to [0, 1] and resized (aspect kept) to at most max_pixels with sides a multiple
// of patch_size; the task goes into the reference's chat prompt; the model's last hidden states
// over [image tokens, prompt tokens] are the action expert's context.
//
// reuse_metadata (the online profile's "VLM metadata reuse"): formatted prompts and their token ids
// are kept in an LRU of 256 keyed by (task, number of images, view names), and the vision metadata
// (patch grid offsets, attention layout, RoPE positions) in an LRU of 16 keyed by the image grid.
// Hits and misses are counted as prompt_cache_hits / _misses and vision_metadata_cache_hits /
// _misses. Off, everything is recomputed for every batch (the baseline).
//
// Reads:  vlm_current_images (uint8 [B, V, 3, H, W]), task (Json array of B strings)
// Writes: vlm_context [B, S, width] (S = V * image patches + the batch's longest prompt; rows of
//         padding are zero), vlm_mask (bool [B, S], false on padding)
// merge_cached (the cache profile): rows whose vlm_cache_hit is true take LatentCacheLookup's
// cached row (vlm_cached_context / vlm_cached_mask); only the miss rows are encoded, from their
// vlm_current_images (present only when the cache misses samples), and every row is zero-padded
// to the longer of the two lengths. The model is loaded on the first miss, so a fully covered
// cache never loads it. Counters: rows_encoded, rows_from_cache.
//
// Example: {"id": "vlm", "type": "VlmEncode", "inputs": ["vae"],
//           "params": {"width": 2048, "reuse_metadata": true,
//                      "view_names": ["main camera", "left wrist camera", "right wrist camera"]}}
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/lru_cache.h"
#include "encode/vlm_encode_params.h"
#include "models/vlm.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

constexpr size_t kPromptCacheSize = 256;
constexpr size_t kVisionMetadataCacheSize = 16;

using PromptKey = std::tuple<std::string, int64_t, std::vector<std::string>>;
using GridKey = std::tuple<int64_t, int64_t, int64_t>;  // images, patch rows, patch columns

class VlmEncodeStage final : public Stage {
 public:
  static constexpr std::string_view kType = "VlmEncode";
  static constexpr std::string_view kSummary =
      "Frozen vision-language model: camera images + task prompt -> last hidden states + mask.";
  using Params = VlmEncodeParams;

  explicit VlmEncodeStage(Params params) : params_(std::move(params)) {}

  void declare(Contract& contract) const override {
    contract.reads("vlm_current_images", FieldType::kTensor);
    contract.reads("task", FieldType::kJson);
    contract.writes("vlm_context", FieldType::kTensor);
    contract.writes("vlm_mask", FieldType::kTensor);
    if (params_.merge_cached) {
      for (const char* field : {"vlm_cache_hit", "vlm_cached_context", "vlm_cached_mask"}) {
        contract.reads(field, FieldType::kTensor);
      }
    }
    contract.concurrency(Concurrency::serial());
  }

  void open(Context& context) override {
    context_ = &context;
    if (params_.encoder == "builtin" && params_.architecture == "compact" &&
        (params_.width % params_.heads != 0 || (params_.width / params_.heads) % 2 != 0)) {
      throw Error("VlmEncode: param width (" + std::to_string(params_.width) +
                  ") divided by param heads (" + std::to_string(params_.heads) +
                  ") must be an even whole number (the RoPE head dimension)");
    }
    placement_ =
        models::resolve_placement(params_.device, params_.dtype, context.settings(), "VlmEncode");
    if (params_.reuse_metadata) {
      prompt_hits_ = &context.counter("prompt_cache_hits");
      prompt_misses_ = &context.counter("prompt_cache_misses");
      metadata_hits_ = &context.counter("vision_metadata_cache_hits");
      metadata_misses_ = &context.counter("vision_metadata_cache_misses");
    }
    if (params_.merge_cached) {
      rows_encoded_ = &context.counter("rows_encoded");
      rows_from_cache_ = &context.counter("rows_from_cache");
      context.log("VlmEncode: cached rows merged; the " + params_.encoder +
                  " model loads on the first cache miss");
      return;
    }
    load_model(context);
  }

  void process(Sample batch, Emitter& out) override {
    if (params_.merge_cached) {
      merge_cached(batch);
    } else {
      auto [context, mask] = encode(batch.tensor("vlm_current_images"), batch.get_json("task"));
      batch.set_tensor("vlm_context", std::move(context));
      batch.set_tensor("vlm_mask", std::move(mask));
    }
    out.emit(std::move(batch));
  }

 private:
  void load_model(const Context& context) {
    if (params_.encoder != "builtin") {
      exported_.emplace(params_.encoder, params_.path, params_.width, placement_);
    } else {
      builtin_ = std::make_unique<models::BuiltinVlm>(
          static_cast<const models::VlmConfig&>(params_),
          models::BuiltinWeights{static_cast<uint64_t>(params_.seed), params_.weights}, placement_);
    }
    context.log("VlmEncode: " + params_.encoder + " model on " + placement_.device.str() + " (" +
                params_.dtype + "), metadata reuse " + (params_.reuse_metadata ? "on" : "off"));
    model_loaded_ = true;
  }

  // Cached rows where vlm_cache_hit, the encoder's rows elsewhere, zero-padded to one length.
  void merge_cached(Sample& batch) {
    const at::Tensor hit = batch.tensor("vlm_cache_hit").to(at::kCPU);
    const at::Tensor& cached_context = batch.tensor("vlm_cached_context");
    const at::Tensor& cached_mask = batch.tensor("vlm_cached_mask");
    const at::Tensor misses = at::nonzero(hit.logical_not()).flatten();
    const int64_t rows = hit.size(0), miss_count = misses.size(0);
    rows_from_cache_->add(rows - miss_count);
    if (miss_count == 0) {
      batch.set_tensor("vlm_context", cached_context);
      batch.set_tensor("vlm_mask", cached_mask);
      return;
    }
    if (!model_loaded_) load_model(*context_);
    nlohmann::json miss_tasks = nlohmann::json::array();
    const nlohmann::json& tasks = batch.get_json("task");
    for (int64_t i = 0; i < miss_count; ++i) {
      miss_tasks.push_back(tasks.at(misses[i].item<int64_t>()));
    }
    const at::Tensor images = batch.tensor("vlm_current_images");
    auto [encoded, encoded_mask] =
        encode(images.index_select(0, misses.to(images.device())), miss_tasks);
    rows_encoded_->add(miss_count);
    const int64_t length = std::max(cached_context.size(1), encoded.size(1));
    const at::Device device = encoded.device();
    at::Tensor context = at::zeros({rows, length, encoded.size(2)}, encoded.options());
    at::Tensor mask = at::zeros({rows, length}, encoded_mask.options());
    context.narrow(1, 0, cached_context.size(1))
        .copy_(cached_context.to(device, encoded.scalar_type()));
    mask.narrow(1, 0, cached_mask.size(1)).copy_(cached_mask.to(device));
    const at::Tensor miss_rows = misses.to(device);
    context.index_copy_(0, miss_rows,
                        at::constant_pad_nd(encoded, {0, 0, 0, length - encoded.size(1)}));
    mask.index_copy_(0, miss_rows,
                     at::constant_pad_nd(encoded_mask, {0, length - encoded.size(1)}));
    batch.set_tensor("vlm_context", std::move(context));
    batch.set_tensor("vlm_mask", std::move(mask));
  }

  // The model's context rows and mask for a batch of per-camera frames and their tasks.
  std::pair<at::Tensor, at::Tensor> encode(const at::Tensor& frames, const nlohmann::json& tasks) {
    if (frames.dim() != 5 || frames.size(2) != 3 || frames.scalar_type() != at::kByte) {
      throw Error("field \"vlm_current_images\" is " + describe_tensor(frames) +
                  "; VlmEncode expects uint8 [B, V, 3, H, W] (a batch of per-camera frames)");
    }
    const int64_t rows = frames.size(0), views = frames.size(1);
    const std::vector<std::string> view_names = names_for(views);
    if (!tasks.is_array() || static_cast<int64_t>(tasks.size()) != rows) {
      throw Error("field \"task\" must be a Json array of " + std::to_string(rows) +
                  " strings (one per row of vlm_current_images), got " + tasks.dump());
    }

    // Token ids, right-padded to the batch's longest prompt.
    std::vector<std::vector<int64_t>> prompts;
    size_t longest = 0;
    for (const auto& task : tasks) {
      if (!task.is_string()) throw Error("field \"task\": expected strings, got " + task.dump());
      prompts.push_back(prompt_for(task.get<std::string>(), view_names));
      longest = std::max(longest, prompts.back().size());
    }
    at::Tensor token_ids =
        torch::full({rows, static_cast<int64_t>(longest)}, models::kPadToken, at::kLong);
    for (int64_t r = 0; r < rows; ++r) {
      const auto& ids = prompts[r];
      std::copy(ids.begin(), ids.end(), token_ids[r].data_ptr<int64_t>());
    }

    // qwen3_vl merges spatial_merge^2 patches into a token: sides are multiples of the group.
    const int64_t factor =
        params_.encoder == "builtin" ? params_.resize_factor() : params_.patch_size;
    const auto [height, width] =
        models::fit_image_size(frames.size(3), frames.size(4), params_.max_pixels, factor);
    at::Tensor images = frames.reshape({rows * views, 3, frames.size(3), frames.size(4)})
                            .to(placement_.device)
                            .to(at::kFloat)
                            .div(255.0);
    if (height != frames.size(3) || width != frames.size(4)) {
      images =
          torch::nn::functional::interpolate(images, torch::nn::functional::InterpolateFuncOptions()
                                                         .size(std::vector<int64_t>{height, width})
                                                         .mode(torch::kBilinear)
                                                         .align_corners(false));
    }
    images = images.to(placement_.dtype);

    at::Tensor hidden;
    if (builtin_) {
      const models::VisionMetadata metadata =
          metadata_for(views, height / params_.patch_size, width / params_.patch_size);
      hidden = builtin_->encode(images, token_ids, metadata);
    } else {
      hidden = exported_->encode(images, token_ids);
    }
    const int64_t image_tokens = hidden.size(1) - static_cast<int64_t>(longest);
    const at::Tensor mask =
        torch::cat({torch::ones({rows, image_tokens}, at::kBool), token_ids != models::kPadToken},
                   1)
            .to(hidden.device());
    return {hidden * mask.unsqueeze(-1).to(hidden.scalar_type()), mask};
  }

  std::vector<std::string> names_for(int64_t views) const {
    if (params_.view_names.empty()) {
      std::vector<std::string> names;
      for (int64_t v = 1; v <= views; ++v) names.push_back("camera " + std::to_string(v));
      return names;
    }
    if (static_cast<int64_t>(params_.view_names.size()) != views) {
      throw Error("VlmEncode: param view_names has " + std::to_string(params_.view_names.size()) +
                  " names but vlm_current_images has " + std::to_string(views) +
                  " cameras; give one name per camera, in order");
    }
    return params_.view_names;
  }

  // The prompt's token ids (the formatted prompt is only ever needed as tokens).
  std::vector<int64_t> prompt_for(const std::string& task,
                                  const std::vector<std::string>& view_names) {
    auto tokenize = [&] {
      return models::tokenize_words(models::format_vlm_prompt(task, view_names),
                                    params_.vocab_size);
    };
    if (!params_.reuse_metadata) return tokenize();
    const PromptKey key{task, static_cast<int64_t>(view_names.size()), view_names};
    if (const std::vector<int64_t>* hit = prompts_.find(key)) {
      prompt_hits_->add();
      return *hit;
    }
    prompt_misses_->add();
    return prompts_.insert(key, tokenize());
  }

  models::VisionMetadata metadata_for(int64_t images, int64_t grid_h, int64_t grid_w) {
    if (!params_.reuse_metadata) return builtin_->vision_metadata(images, grid_h, grid_w);
    const GridKey key{images, grid_h, grid_w};
    if (const models::VisionMetadata* hit = metadata_.find(key)) {
      metadata_hits_->add();
      return *hit;
    }
    metadata_misses_->add();
    return metadata_.insert(key, builtin_->vision_metadata(images, grid_h, grid_w));
  }

  Params params_;
  const Context* context_ = nullptr;
  bool model_loaded_ = false;
  models::EncoderPlacement placement_;
  std::unique_ptr<models::BuiltinVlm> builtin_;
  std::optional<models::ExportedVlm> exported_;
  LruCache<PromptKey, std::vector<int64_t>> prompts_{kPromptCacheSize};
  LruCache<GridKey, models::VisionMetadata> metadata_{kVisionMetadataCacheSize};
  Counter* prompt_hits_ = nullptr;
  Counter* prompt_misses_ = nullptr;
  Counter* metadata_hits_ = nullptr;
  Counter* metadata_misses_ = nullptr;
  Counter* rows_encoded_ = nullptr;
  Counter* rows_from_cache_ = nullptr;
};

WAM_REGISTER_STAGE(VlmEncodeStage);

}  // namespace
}  // namespace wam::stages
