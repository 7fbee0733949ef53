// The params the frozen encoders share (VaeEncode, VlmEncode, and TextEmbed's text-cache encoder),
// declared once: each encoder's Params derives from one of these structs and calls
// visit_encoder_params() from its visit(), so the keys, docs and allowed values are written here
// and the pipeline JSON keeps the same flat keys.
#pragma once

#include <cstdint>
#include <string>

#include "wam/params.h"

namespace wam {

// Which encoder, and where its weights come from.
struct FrozenEncoderParams {
  std::string encoder = "builtin";
  std::string path;
  int64_t seed = 0;

  // `encoder_doc`: what "builtin" is and the forward() that a "torchscript" file must have.
  template <class V>
  void visit_encoder_params(V& v, const char* encoder_doc) {
    v("encoder", encoder, encoder_doc, OneOf{"builtin", "torchscript"});
    v("path", path, "TorchScript file (torch.jit.save) for encoder \"torchscript\".");
    v("seed", seed, "Built-in stand-in: weight seed (the same seed gives the same weights).",
      Min{0});
  }
};

// An encoder that a pipeline stage runs, with its device and precision (the text-cache encoder
// runs on the CPU in `wam-pipeline text-cache build`).
struct PlacedEncoderParams : FrozenEncoderParams {
  std::string device = "auto";
  std::string dtype = "auto";

  template <class V>
  void visit_encoder_params(V& v, const char* encoder_doc) {
    FrozenEncoderParams::visit_encoder_params(v, encoder_doc);
    v("device", device, "Where the encoder runs (auto: settings.device).",
      OneOf{"auto", "cpu", "cuda"});
    v("dtype", dtype,
      "Encoder precision, which its outputs keep (auto: bfloat16 on CUDA, float32 on the CPU).",
      OneOf{"auto", "float32", "bfloat16"});
  }
};

}  // namespace wam
