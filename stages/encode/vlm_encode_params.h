// VlmEncode's params (stages/encode/vlm_encode.cc), in a header of their own so that other stages
// and commands use them as a type (LatentCacheLookup nests them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/encoder_params.h"
#include "models/vlm_config.h"
#include "wam/params.h"

namespace wam::stages {

// The model's structure is models::VlmConfig's; the stage adds where it runs and how it is fed.
struct VlmEncodeParams : PlacedEncoderParams, models::VlmConfig {
  int64_t max_pixels = 65536;
  std::vector<std::string> view_names;
  bool reuse_metadata = false;
  bool merge_cached = false;

  template <class V>
  void visit(V& v) {
    visit_encoder_params(
        v,
        "builtin: a Qwen-VL-shaped stand-in with seeded random weights; torchscript: the file at "
        "`path`, forward(images float [B*V,3,h,w] in [0,1], token_ids int64 [B,L] right-padded "
        "with 0) -> hidden [B,S,width], S-L image tokens first, then one row per token id.");
    v("architecture", architecture,
      "Built-in stand-in: compact (one vision block, then the language layers) or qwen3_vl "
      "(Qwen3-VL-2B's vision tower, merger and language model; configs/encoders/reference.json, "
      "docs/ENCODERS.md).",
      OneOf{"compact", "qwen3_vl"});
    v("width", width, "Hidden width of the context (the action expert's vlm_dim).", Min{1});
    v("layers", layers, "Built-in stand-in: language transformer layers.", Min{1});
    v("heads", heads,
      "Built-in stand-in: attention heads (compact: width / heads must be even; qwen3_vl: query "
      "heads of head_dim).",
      Min{1});
    v("patch_size", patch_size,
      "Image sides are resized to a multiple of this (pixels; qwen3_vl: of patch_size x "
      "spatial_merge).",
      Min{1});
    v("vocab_size", vocab_size, "Built-in stand-in: token ids of the hashing word tokenizer.",
      Min{16});
    v("language_width", language_width,
      "qwen3_vl: language model width (projected to width when they differ).", Min{2});
    v("kv_heads", kv_heads, "qwen3_vl: key/value heads (grouped-query attention).", Min{1});
    v("head_dim", head_dim, "qwen3_vl: language attention head dimension (even).", Min{2});
    v("mlp", mlp, "qwen3_vl: language SwiGLU MLP width.", Min{1});
    v("vision_layers", vision_layers, "qwen3_vl: vision tower depth.", Min{1});
    v("vision_width", vision_width, "qwen3_vl: vision tower width.", Min{2});
    v("vision_heads", vision_heads,
      "qwen3_vl: vision attention heads (vision_width / vision_heads must be even).", Min{1});
    v("vision_mlp", vision_mlp, "qwen3_vl: vision GELU MLP width.", Min{1});
    v("spatial_merge", spatial_merge, "qwen3_vl: patches merged per side into one language token.",
      Min{1});
    v("temporal_patch", temporal_patch,
      "qwen3_vl: frames per patch (a still image is repeated this many times).", Min{1});
    v("position_grid", position_grid,
      "qwen3_vl: side of the learned vision position grid (Qwen3-VL's num_grid_per_side), "
      "resized to each image's patch grid.",
      Min{1});
    v("deepstack_layers", deepstack_layers,
      "qwen3_vl: vision layers whose merged output is added to the image tokens of the first "
      "language layers (Qwen3-VL's deepstack).",
      Min{0});
    v("max_pixels", max_pixels, "Most pixels per camera image after resizing (aspect kept).",
      Min{1});
    v("view_names", view_names,
      "Camera names in the prompt, one per camera of vlm_current_images (empty: camera 1..V).");
    v("reuse_metadata", reuse_metadata,
      "Cache formatted prompts + token ids (LRU 256) and vision metadata per image grid (LRU 16).");
    v("merge_cached", merge_cached,
      "Take LatentCacheLookup's cached rows where vlm_cache_hit, encode only the misses.");
  }

  void check(ParamChecker& c) const {
    check_encoder(c);
    if (!qwen3()) return;
    c.require(heads % kv_heads == 0, "kv_heads",
              "heads (" + std::to_string(heads) + ") must be a multiple of kv_heads (" +
                  std::to_string(kv_heads) + ")");
    c.require(head_dim % 2 == 0, "head_dim", "must be even (the RoPE head dimension)");
    c.require(vision_width % vision_heads == 0 && (vision_width / vision_heads) % 2 == 0,
              "vision_heads",
              "vision_width (" + std::to_string(vision_width) + ") divided by vision_heads (" +
                  std::to_string(vision_heads) + ") must be an even whole number");
    c.require(static_cast<int64_t>(deepstack_layers.size()) <= layers, "deepstack_layers",
              "more deepstack layers than language layers (" + std::to_string(layers) + ")");
    for (size_t i = 0; i < deepstack_layers.size(); ++i) {
      c.require(deepstack_layers[i] < vision_layers, "deepstack_layers/" + std::to_string(i),
                "vision layer " + std::to_string(deepstack_layers[i]) +
                    " does not exist (vision_layers " + std::to_string(vision_layers) + ")");
    }
  }
};

}  // namespace wam::stages
