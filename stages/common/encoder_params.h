// The params the frozen encoders share (VaeEncode, VlmEncode, and TextEmbed's text-cache encoder),
// declared once: each encoder's Params derives from one of these structs and calls
// visit_encoder_params() from its visit(), so the keys, docs and allowed values are written here
// and the pipeline JSON keeps the same flat keys.
#pragma once

#include <cstdint>
#include <string>

#include "wam/limits.h"
#include "wam/params.h"

namespace wam {

// Whether this build's LibTorch loads AOTInductor packages
// (torch::inductor::AOTIModelPackageLoader, LibTorch 2.6 and later: the GPU image's 2.11 has it,
// Debian's 1.13 has not).
#if __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#define WAM_AOTI_PACKAGES 1
#else
#define WAM_AOTI_PACKAGES 0
#endif
inline constexpr bool kAotiPackagesSupported = WAM_AOTI_PACKAGES;

// Which encoder, and where its weights come from.
struct FrozenEncoderParams {
  std::string encoder = "builtin";
  std::string path;
  int64_t seed = 0;
  std::string weights;

  // `encoder_doc`: what "builtin" is and the forward() that a "torchscript" file must have (an
  // "aoti" package has the same).
  template <class V>
  void visit_encoder_params(V& v, const char* encoder_doc) {
    v("encoder", encoder, encoder_doc, OneOf{"builtin", "torchscript", "aoti"});
    v("path", path,
      "The exported module: a TorchScript file (torch.jit.save) for encoder \"torchscript\", an "
      "AOTInductor package (.pt2, scripts/export_encoder.py) with the same forward for \"aoti\".");
    v("seed", seed, "Built-in stand-in: weight seed (the same seed gives the same weights).",
      Min{0});
    v("weights", weights,
      "Built-in stand-in: a safetensors file whose tensors replace the seeded weights by "
      "parameter name (\"\": the seeded ones). A parameter the file lacks, a tensor the stand-in "
      "has no parameter for and a shape that differs are each named in one error.");
  }

  // Called from the params' check(): "aoti" where LibTorch cannot load packages, and a module or
  // weights file that is missing or not a regular file, are refused at validate time, naming the
  // field (the stages check again when they open the file). One error per mistake: a file is
  // looked at only where the encoder would read it.
  void check_encoder(ParamChecker& c) const {
    const bool builtin = encoder == "builtin";
    c.require(weights.empty() || builtin, "weights",
              "a weights file initialises the built-in stand-in; an exported module (encoder \"" +
                  encoder + "\") carries its own weights: drop `weights`");
    if (builtin && !weights.empty()) {
      if (const std::string problem = regular_file_problem(weights); !problem.empty()) {
        c.error("weights", "weights file " + weights + ": " + problem);
      }
    }
    const bool aoti = encoder == "aoti";
    c.require(!aoti || kAotiPackagesSupported, "encoder",
              "\"aoti\" needs a LibTorch with AOTInductor's package loader (2.6 or later), and "
              "this build's has none: export the module with torch.jit.save and use encoder "
              "\"torchscript\", or build against a newer LibTorch");
    if (builtin || (aoti && !kAotiPackagesSupported)) return;
    const std::string kind = aoti ? "AOTInductor package" : "TorchScript file";
    if (path.empty()) {
      c.error("path",
              "required with encoder \"" + encoder + "\": the " + kind +
                  (aoti ? " from scripts/export_encoder.py" : " written by torch.jit.save"));
    } else if (const std::string problem = regular_file_problem(path); !problem.empty()) {
      c.error("path", kind + " " + path + ": " + problem);
    }
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
