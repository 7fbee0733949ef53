// VaeEncode's params (stages/encode/vae_encode.cc), in a header of their own so that other stages
// and commands use them as a type (LatentCacheLookup nests them).
#pragma once

#include <cstdint>

#include "common/encoder_params.h"
#include "wam/params.h"

namespace wam::stages {

struct VaeEncodeParams : PlacedEncoderParams {
  int64_t width = 32;
  bool deduplicate_identical_anchor_batch = true;

  template <class V>
  void visit(V& v) {
    visit_encoder_params(
        v,
        "builtin: a Wan2.2-shaped causal 3-D conv stand-in with seeded random weights; "
        "torchscript: the file at `path`, forward(video [B,3,T,H,W] in [-1,1]) -> latent mean "
        "[B,48,(T-1)/4+1,H/16,W/16].");
    v("width", width, "Built-in stand-in: channels of the first stage (doubled twice).", Min{1});
    v("deduplicate_identical_anchor_batch", deduplicate_identical_anchor_batch,
      "Encode the anchor frame once when every row of the batch has the same one.");
  }
};

}  // namespace wam::stages
