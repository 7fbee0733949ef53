// The C++ half of tests/scripts/export_encoder_test.sh: loads an AOTInductor package written by
// scripts/export_encoder.py (or the TorchScript file its --torchscript wrote) the way the stages
// do (models::load_exported_module, and for a VAE through VaeEncode itself), runs it on the
// example inputs the script saved, and compares with the Python module's output saved beside
// them. Usage:
//   wam_export_encoder_check KIND FILE REFERENCE.safetensors [aoti|torchscript]  (default aoti)
//   wam_export_encoder_check vae WEIGHTS.safetensors REFERENCE.safetensors builtin
// The last form runs VaeEncode's built-in stand-in with the weights file (its width read from
// stem.conv.weight): scripts/vae_standin.py's weights give its output (vae_standin_test.sh).
//   wam_export_encoder_check --supported     (prints whether this LibTorch loads packages)
// Prints the largest differences; exits 1 when one exceeds 1e-4 of the output's largest value.
#include <torch/torch.h>

#include <iostream>
#include <string>
#include <vector>

#include "common/encoder_params.h"
#include "common/io/safetensors.h"
#include "models/frozen_encoder.h"
#include "models/weights_file.h"
#include "testing/stage_harness.h"

namespace {

double relative_difference(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor difference = (got.to(at::kFloat) - want.to(at::kFloat)).abs().max();
  return difference.item<double>() / std::max(1.0, want.abs().max().item<double>());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--supported") {
    std::cout << (wam::kAotiPackagesSupported ? "yes" : "no") << "\n";
    return 0;
  }
  const std::string encoder = argc == 5 ? argv[4] : "aoti";
  if ((argc != 4 && argc != 5) ||
      (encoder != "aoti" && encoder != "torchscript" && encoder != "builtin")) {
    std::cerr << "usage: wam_export_encoder_check vae|vlm|text FILE REFERENCE.safetensors "
                 "[aoti|torchscript|builtin]\n";
    return 2;
  }
  const std::string kind = argv[1], package = argv[2];
  try {
    const wam::safetensors::Reader reader(argv[3]);
    std::vector<at::Tensor> inputs;
    at::Tensor want;
    for (const wam::safetensors::TensorInfo& info : reader.tensors()) {
      const at::Tensor tensor = wam::models::read_tensor(reader, info);
      if (info.name == "output") {
        want = tensor;
      } else {
        inputs.push_back(tensor);
      }
    }
    const wam::models::EncoderPlacement placement{at::kCPU, want.scalar_type()};
    bool ok = true;
    std::string vae_params = R"("encoder": ")" + encoder + R"(", "path": ")" + package + R"(")";
    if (encoder == "builtin") {
      const wam::safetensors::Reader weights(package);
      for (const wam::safetensors::TensorInfo& info : weights.tensors()) {
        if (info.name == "stem.conv.weight") {
          vae_params =
              R"("weights": ")" + package + R"(", "width": )" + std::to_string(info.shape.at(0));
        }
      }
    } else {
      const std::unique_ptr<wam::models::ExportedModule> module =
          wam::models::load_exported_module(encoder, package, "export_encoder_check", placement);
      const double direct = relative_difference(module->call(inputs), want);
      std::cout << encoder << " file through load_exported_module: largest difference " << direct
                << " of the output's scale\n";
      ok = direct <= 1e-4;
    }
    if (kind == "vae") {
      const std::string dtype = want.scalar_type() == at::kBFloat16 ? "bfloat16" : "float32";
      wam::testing::SteppedStage stage(
          "VaeEncode", "{" + vae_params + R"(, "device": "cpu", "dtype": ")" + dtype + R"("})");
      wam::Sample sample;
      for (const char* field : {"video", "memory_video_anchor", "memory_video_recent"}) {
        sample.set_tensor(field, inputs[0]);
      }
      const wam::Sample out = stage.process_one(std::move(sample));
      const double staged = relative_difference(out.tensor("video_latents"), want);
      std::cout << encoder << " file through VaeEncode: largest difference " << staged
                << " of the output's scale\n";
      ok = ok && staged <= 1e-4;
    }
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "wam_export_encoder_check: " << e.what() << "\n";
    return 1;
  }
}
