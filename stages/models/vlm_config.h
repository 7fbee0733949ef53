// The built-in VLM stand-in's structure, without LibTorch: BuiltinVlm (models/vlm.h) is built from
// it, and VlmEncode's params (encode/vlm_encode_params.h) derive from it, so that the fields and
// their defaults are declared once and the torch-free users of those params (the cache contract,
// LatentCacheLookup) need no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wam::models {

// compact: one vision block at the language width over the patches, then `layers` blocks.
// qwen3_vl: Qwen3-VL's structure (docs/ENCODERS.md): patch embedding over temporal_patch copies of
// each image, a learned position grid (position_grid^2, bilinearly resized), vision_layers blocks
// of vision_width attending within each image, a merger of spatial_merge^2 patches into one token
// of language_width (and one more per deepstack layer, added to the first language layers' image
// tokens), then `layers` grouped-query blocks with QK-norm and a SwiGLU MLP of `mlp`; a last
// projection to `width` only when language_width differs from it.
struct VlmConfig {
  std::string architecture = "compact";
  int64_t width = 2048;
  int64_t layers = 2;
  int64_t heads = 16;
  int64_t patch_size = 16;
  int64_t vocab_size = 32768;
  // qwen3_vl only; the defaults are Qwen3-VL-2B's (docs/ENCODERS.md).
  int64_t language_width = 2048;
  int64_t kv_heads = 8;
  int64_t head_dim = 128;
  int64_t mlp = 6144;
  int64_t vision_layers = 24;
  int64_t vision_width = 1024;
  int64_t vision_heads = 16;
  int64_t vision_mlp = 4096;
  int64_t spatial_merge = 2;
  int64_t temporal_patch = 2;
  int64_t position_grid = 48;
  std::vector<int64_t> deepstack_layers = {5, 11, 17};

  bool qwen3() const { return architecture == "qwen3_vl"; }
  // Image sides are multiples of this: a patch, or a merged group of patches.
  int64_t resize_factor() const { return qwen3() ? patch_size * spatial_merge : patch_size; }
};

}  // namespace wam::models
