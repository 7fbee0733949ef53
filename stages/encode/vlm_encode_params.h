// VlmEncode's params (stages/encode/vlm_encode.cc), in a header of their own so that other stages
// and commands use them as a type (LatentCacheLookup nests them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/encoder_params.h"
#include "wam/params.h"

namespace wam::stages {

struct VlmEncodeParams : PlacedEncoderParams {
  int64_t width = 2048;
  int64_t layers = 2;
  int64_t heads = 16;
  int64_t patch_size = 16;
  int64_t vocab_size = 32768;
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
    v("width", width, "Hidden width of the context (the action expert's vlm_dim).", Min{1});
    v("layers", layers, "Built-in stand-in: language transformer layers.", Min{1});
    v("heads", heads, "Built-in stand-in: attention heads (width / heads must be even).", Min{1});
    v("patch_size", patch_size, "Image sides are resized to a multiple of this (pixels).", Min{1});
    v("vocab_size", vocab_size, "Built-in stand-in: token ids of the hashing word tokenizer.",
      Min{16});
    v("max_pixels", max_pixels, "Most pixels per camera image after resizing (aspect kept).",
      Min{1});
    v("view_names", view_names,
      "Camera names in the prompt, one per camera of vlm_current_images (empty: camera 1..V).");
    v("reuse_metadata", reuse_metadata,
      "Cache formatted prompts + token ids (LRU 256) and vision metadata per image grid (LRU 16).");
    v("merge_cached", merge_cached,
      "Take LatentCacheLookup's cached rows where vlm_cache_hit, encode only the misses.");
  }
};

}  // namespace wam::stages
