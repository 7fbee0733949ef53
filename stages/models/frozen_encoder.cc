#include "models/frozen_encoder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/script.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/device.h"
#include "common/encoder_params.h"  // WAM_AOTI_PACKAGES
#include "models/weights_file.h"
#include "wam/error.h"

#if WAM_AOTI_PACKAGES
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#endif

namespace wam::models {

EncoderPlacement resolve_placement(const std::string& device, const std::string& dtype,
                                   const Settings& settings, const std::string& owner) {
  EncoderPlacement placement;
  placement.device = resolve_device(device, settings, owner);
  const bool bfloat16 = dtype == "bfloat16" || (dtype == "auto" && placement.device.is_cuda());
  placement.dtype = bfloat16 ? at::kBFloat16 : at::kFloat;
  return placement;
}

void init_frozen(torch::nn::Module& module, const BuiltinWeights& weights,
                 const EncoderPlacement& placement) {
  torch::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(weights.seed);
  // named_parameters() is ordered by registration, so the draws are the same on every build.
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    at::Tensor& p = item.value();
    const std::string& name = item.key();
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    if (is_bias) {
      p.zero_();
    } else if (p.dim() == 1) {
      p.fill_(1.0);
    } else {
      const double fan_in = static_cast<double>(p.numel() / p.size(0));
      p.normal_(0.0, 1.0 / std::sqrt(fan_in), generator);
    }
    p.set_requires_grad(false);
  }
  module.eval();
  module.to(placement.device, placement.dtype);
  if (!weights.file.empty()) load_module_weights(module, weights.file);
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) count += p.numel();
  return count;
}

namespace {

class ScriptModule final : public ExportedModule {
 public:
  ScriptModule(torch::jit::Module module, std::string what)
      : module_(std::move(module)), what_(std::move(what)) {}

  at::Tensor call(const std::vector<at::Tensor>& inputs) override {
    torch::jit::IValue output;
    try {
      output = module_.forward(std::vector<torch::jit::IValue>(inputs.begin(), inputs.end()));
    } catch (const c10::Error& e) {
      throw Error(what_ + ": forward failed: " + e.what_without_backtrace());
    }
    if (!output.isTensor()) {
      throw Error(what_ + ": forward must return a Tensor, got " + output.tagKind());
    }
    return output.toTensor();
  }

  int64_t parameter_count() const override {
    int64_t count = 0;
    for (const auto& p : module_.parameters()) count += p.numel();
    return count;
  }

  const char* kind() const override { return "TorchScript"; }

 private:
  torch::jit::Module module_;
  std::string what_;  // "VaeEncode: TorchScript file PATH"
};

std::unique_ptr<ExportedModule> load_script(const std::string& path, const std::string& what,
                                            const EncoderPlacement& placement) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, placement.device);
  } catch (const c10::Error& e) {
    throw Error(what + ": cannot load TorchScript file " + path + ": " +
                e.what_without_backtrace());
  }
  module.eval();
  for (auto p : module.parameters()) p.set_requires_grad(false);
  module.to(placement.dtype);
  return std::make_unique<ScriptModule>(std::move(module), what + ": TorchScript file " + path);
}

#if WAM_AOTI_PACKAGES
// A .pt2 package is a zip archive. Its first bytes are checked before LibTorch's loader sees it:
// with LibTorch 2.11 a file of other bytes did not come back as the error the stages give
// (tests/scripts/export_encoder_test.sh, "a damaged package").
void check_zip_archive(const std::string& path, const std::string& what) {
  std::ifstream file(path, std::ios::binary);
  char magic[4] = {};
  file.read(magic, sizeof(magic));
  if (!file || std::string(magic, sizeof(magic)) != std::string("PK\x03\x04", 4)) {
    throw Error(what + ": cannot load AOTInductor package " + path +
                ": not a zip archive, which a package is: export it again with "
                "scripts/export_encoder.py");
  }
}

class AotiPackage final : public ExportedModule {
 public:
  AotiPackage(const std::string& path, const std::string& model, const std::string& what,
              const EncoderPlacement& placement)
      : what_(what + ": AOTInductor package " + path +
              (model == "model" ? "" : " (" + model + ")")),
        loader_(load(path, model, what, placement)) {}

  at::Tensor call(const std::vector<at::Tensor>& inputs) override {
    std::vector<at::Tensor> outputs;
    try {
      outputs = loader_->run(inputs);
    } catch (const c10::Error& e) {
      throw Error(what_ + ": forward failed: " + e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw Error(what_ + ": forward failed: " + e.what());
    }
    if (outputs.size() != 1) {
      throw Error(what_ + ": forward must return one Tensor, got " +
                  std::to_string(outputs.size()));
    }
    return outputs[0];
  }

  int64_t parameter_count() const override { return -1; }

  const char* kind() const override { return "AOTInductor"; }

 private:
  static std::unique_ptr<torch::inductor::AOTIModelPackageLoader> load(
      const std::string& path, const std::string& model, const std::string& what,
      const EncoderPlacement& placement) {
    check_zip_archive(path, what);
    const std::string failed =
        what + ": cannot load model \"" + model + "\" of AOTInductor package " + path + ": ";
    try {
      return std::make_unique<torch::inductor::AOTIModelPackageLoader>(
          path, model, /*run_single_threaded=*/false, /*num_runners=*/1,
          placement.device.is_cuda() ? placement.device.index() : c10::DeviceIndex(-1));
    } catch (const c10::Error& e) {
      throw Error(failed + e.what_without_backtrace());
    } catch (const std::exception& e) {
      throw Error(failed + e.what());
    }
  }

  std::string what_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
};
#endif

}  // namespace

std::unique_ptr<ExportedModule> load_exported_module(const std::string& encoder,
                                                     const std::string& path,
                                                     const std::string& what,
                                                     const EncoderPlacement& placement,
                                                     const std::string& package_model) {
  const bool aoti = encoder == "aoti";
  if (path.empty()) {
    throw Error(what + ": param path is required with encoder \"" + encoder + "\" (" +
                (aoti ? "an AOTInductor package from scripts/export_encoder.py"
                      : "a file written by torch.jit.save") +
                ")");
  }
  if (!std::filesystem::is_regular_file(path)) {
    throw Error(what + ": " + (aoti ? "AOTInductor package " : "TorchScript file ") + path +
                " does not exist");
  }
  if (!aoti) return load_script(path, what, placement);
#if WAM_AOTI_PACKAGES
  return std::make_unique<AotiPackage>(path, package_model, what, placement);
#else
  throw Error(what +
              ": encoder \"aoti\" needs a LibTorch with AOTInductor's package loader "
              "(2.6 or later), and this build's has none");
#endif
}

std::string shape_string(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << sizes;
  return out.str();
}

RMSNormImpl::RMSNormImpl(int64_t width) {
  weight_ = register_parameter("weight", torch::ones({width}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + 1e-6);
  return normed.to(x.scalar_type()) * weight_;
}

std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t temporal = half / 4;
  const int64_t rows = (half - temporal) / 2;
  const auto options = at::TensorOptions().dtype(at::kFloat).device(positions.device());
  // Which position row (0 temporal, 1 row, 2 column) drives each frequency.
  at::Tensor section = torch::full({half}, 2, options.dtype(at::kLong));
  section.narrow(0, 0, temporal).fill_(0);
  section.narrow(0, temporal, rows).fill_(1);
  const at::Tensor inv_freq =
      torch::pow(10000.0, -torch::arange(0, half, options) * 2.0 / static_cast<double>(head_dim));
  const at::Tensor angles =
      positions.to(at::kFloat).index_select(0, section).transpose(0, 1) * inv_freq;  // [S, half]
  return {angles.cos(), angles.sin()};
}

namespace {

// x [B, H, S, head_dim]; cos, sin [S, head_dim / 2].
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor x1 = x.narrow(-1, 0, half).to(at::kFloat);
  const at::Tensor x2 = x.narrow(-1, half, half).to(at::kFloat);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).to(x.scalar_type());
}

}  // namespace

EncoderBlockImpl::EncoderBlockImpl(int64_t width, int64_t heads)
    : EncoderBlockImpl(BlockShape{width, heads}) {}

EncoderBlockImpl::EncoderBlockImpl(const BlockShape& shape) : shape_(shape) {
  const int64_t width = shape.width, head = shape.head();
  const int64_t q_width = shape.heads * head, kv_width = shape.kv() * head;
  attention_norm_ = register_module("attention_norm", RMSNorm(width));
  qkv_ = register_module(
      "qkv", torch::nn::Linear(torch::nn::LinearOptions(width, q_width + 2 * kv_width)));
  out_ = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(q_width, width)));
  mlp_norm_ = register_module("mlp_norm", RMSNorm(width));
  const int64_t up = shape.gated ? 2 * shape.hidden() : shape.hidden();
  gate_up_ = register_module("gate_up", torch::nn::Linear(torch::nn::LinearOptions(width, up)));
  down_ =
      register_module("down", torch::nn::Linear(torch::nn::LinearOptions(shape.hidden(), width)));
  if (shape.qk_norm) {
    q_norm_ = register_module("q_norm", RMSNorm(head));
    k_norm_ = register_module("k_norm", RMSNorm(head));
  }
}

at::Tensor EncoderBlockImpl::forward(const at::Tensor& x, const at::Tensor& cos,
                                     const at::Tensor& sin, const at::Tensor& attention_bias) {
  const int64_t batch = x.size(0), length = x.size(1);
  const int64_t head = shape_.head(), kv = shape_.kv();
  auto split = [&](const at::Tensor& t, int64_t heads) {
    return t.reshape({batch, length, heads, head}).transpose(1, 2);
  };
  const auto qkv =
      qkv_(attention_norm_(x)).split_with_sizes({shape_.heads * head, kv * head, kv * head}, -1);
  at::Tensor q = split(qkv[0], shape_.heads), k = split(qkv[1], kv);
  if (shape_.qk_norm) {
    q = q_norm_(q);
    k = k_norm_(k);
  }
  q = apply_rope(q, cos, sin);
  k = apply_rope(k, cos, sin);
  at::Tensor v = split(qkv[2], kv);
  if (kv != shape_.heads) {  // grouped-query attention: each key/value head serves a group
    k = k.repeat_interleave(shape_.heads / kv, 1);
    v = v.repeat_interleave(shape_.heads / kv, 1);
  }
  // Scores and softmax in float32: the bias holds -inf and bf16 loses the small differences.
  const at::Tensor scores =
      torch::matmul(q, k.transpose(-2, -1)).to(at::kFloat) / std::sqrt(double(head)) +
      attention_bias;
  const at::Tensor attended = torch::matmul(scores.softmax(-1).to(v.scalar_type()), v);
  at::Tensor h = x + out_(attended.transpose(1, 2).reshape({batch, length, shape_.heads * head}));
  auto act = [&](const at::Tensor& t) {
    return shape_.gelu ? torch::gelu(t, "tanh") : torch::silu(t);
  };
  if (!shape_.gated) return h + down_(act(gate_up_(mlp_norm_(h))));
  const auto gate_up = gate_up_(mlp_norm_(h)).chunk(2, -1);
  return h + down_(act(gate_up[0]) * gate_up[1]);
}

at::Tensor key_padding_bias(const at::Tensor& key_mask, at::ScalarType dtype) {
  at::Tensor bias = torch::zeros(key_mask.sizes(), key_mask.options().dtype(dtype));
  bias.masked_fill_(key_mask.logical_not(), -std::numeric_limits<float>::infinity());
  return bias.unsqueeze(1).unsqueeze(1);
}

}  // namespace wam::models
