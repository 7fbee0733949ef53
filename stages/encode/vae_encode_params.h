// VaeEncode's params (stages/encode/vae_encode.cc), in a header of their own so that other stages
// and commands use them as a type (LatentCacheLookup nests them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/encoder_params.h"
#include "wam/params.h"

namespace wam::stages {

struct VaeEncodeParams : PlacedEncoderParams {
  std::string architecture = "compact";
  int64_t width = 32;
  std::vector<int64_t> width_multipliers = {1, 2, 4, 4};
  int64_t res_blocks = 2;
  bool deduplicate_identical_anchor_batch = true;

  template <class V>
  void visit(V& v) {
    visit_encoder_params(
        v,
        "builtin: a Wan2.2-shaped causal 3-D conv stand-in with seeded random weights; "
        "torchscript: the file at `path`, forward(video [B,3,T,H,W] in [-1,1]) -> latent mean "
        "[B,48,(T-1)/4+1,H/16,W/16].");
    v("architecture", architecture,
      "Built-in stand-in: compact (a light causal conv stack) or wan22 (Wan2.2's encoder "
      "structure and cost, configs/encoders/reference.json; docs/ENCODERS.md).",
      OneOf{"compact", "wan22"});
    v("width", width,
      "Built-in stand-in: channels of the first stage (compact: doubled twice; wan22: the base "
      "width, Wan2.2's 160).",
      Min{1});
    v("width_multipliers", width_multipliers,
      "wan22: channels of each level as multiples of width (4 levels: 16x spatial).", Min{1});
    v("res_blocks", res_blocks, "wan22: residual blocks per level.", Min{1});
    v("deduplicate_identical_anchor_batch", deduplicate_identical_anchor_batch,
      "Encode the anchor frame once when every row of the batch has the same one.");
  }

  void check(ParamChecker& c) const {
    check_encoder(c);
    if (architecture == "wan22") {
      c.require(width_multipliers.size() == 4, "width_multipliers",
                "wan22 needs 4 levels (patchify 2x2 and 3 downsamplings: 16x spatial), got " +
                    std::to_string(width_multipliers.size()));
    }
  }
};

}  // namespace wam::stages
