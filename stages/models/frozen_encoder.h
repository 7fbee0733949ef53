// What the frozen encoders (VAE, VLM, text) share: where they run, seeded initialisation of the
// built-in stand-ins, loading a user's exported module (TorchScript or AOTInductor), and the
// pre-norm transformer block the VLM and text stand-ins are made of.
//
// Encoders run under torch::NoGradGuard, not InferenceMode: their outputs feed the trained model,
// and inference tensors cannot be saved for its backward pass.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "wam/stage.h"

namespace wam::models {

// Device and precision of a frozen encoder.
struct EncoderPlacement {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
};

// device: "auto" (settings.device) | "cpu" | "cuda", as resolve_device; dtype: "auto" (bfloat16
// on CUDA, as the reference runs its frozen models under bf16 mixed precision; float32 on the CPU,
// where bfloat16 is slow) | "float32" | "bfloat16". Throws wam::Error naming `owner` when CUDA is
// asked for but LibTorch has none.
EncoderPlacement resolve_placement(const std::string& device, const std::string& dtype,
                                   const Settings& settings, const std::string& owner);

// Where a built-in stand-in's weights come from: drawn from `seed`, then, when `file` is given,
// replaced by that safetensors file's tensors of the same names (the encoders' `weights` param).
struct BuiltinWeights {
  uint64_t seed = 0;
  std::string file;
};

// Gives every parameter of `module` a value drawn from `weights.seed` alone (matrices normal with
// std 1/sqrt(fan_in), norm scales 1, biases 0), then freezes it: no gradients, eval mode, and moves
// it to `placement`. The same seed gives the same weights on every machine. With `weights.file`,
// the file's tensors then replace them by name (load_module_weights: every missing, unexpected or
// mis-shaped tensor named in one wam::Error).
void init_frozen(torch::nn::Module& module, const BuiltinWeights& weights,
                 const EncoderPlacement& placement);

// The number of weights of `module` and its submodules.
int64_t count_parameters(const torch::nn::Module& module);

// A user's exported frozen module: encoder "torchscript", a file written by torch.jit.save, or
// "aoti", one model of an AOTInductor package (scripts/export_encoder.py), compiled for one device
// and dtype. Called with tensors, returns one tensor.
class ExportedModule {
 public:
  virtual ~ExportedModule() = default;
  // Runs forward(inputs); throws wam::Error naming the encoder and the path when it fails or does
  // not return one tensor.
  virtual at::Tensor call(const std::vector<at::Tensor>& inputs) = 0;
  // Weights held: a TorchScript module's parameters; -1 for an AOTInductor package, whose weights
  // are constants of the compiled code.
  virtual int64_t parameter_count() const = 0;
  // "TorchScript" or "AOTInductor", for messages.
  virtual const char* kind() const = 0;
};

// Loads `path` as `encoder` ("torchscript" or "aoti") on `placement`, gradients off; of a package,
// the model named `package_model` (export_encoder.py writes "model", and for a VAE also
// "single_frame"). Throws wam::Error naming `what` (the stage) and the path when the path is
// empty or not a file, the file is not of that kind, the package has no such model, or this
// LibTorch cannot load AOTInductor packages.
std::unique_ptr<ExportedModule> load_exported_module(const std::string& encoder,
                                                     const std::string& path,
                                                     const std::string& what,
                                                     const EncoderPlacement& placement,
                                                     const std::string& package_model = "model");

// "[1, 48, 2, 4, 4]"
std::string shape_string(at::IntArrayRef sizes);

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t width);
  at::Tensor forward(const at::Tensor& x);

 private:
  at::Tensor weight_;
};
TORCH_MODULE(RMSNorm);

// Rotary tables for `positions` [3, S] (Qwen-VL's multimodal RoPE: the rotary frequencies are split
// in three sections driven by the temporal, row and column position; 1-D text uses three equal
// rows). Returns cos and sin, each [S, head_dim / 2], float32.
std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions, int64_t head_dim);

// The shape of an EncoderBlock. The defaults (kv_heads = heads, head_dim = width / heads, a SiLU-
// gated MLP of 2 * width) are the compact stand-ins' blocks; the reference-cost preset sets the
// reference's (Qwen3's grouped-query attention with QK-norm, the vision tower's plain GELU MLP,
// umT5's gated GELU; docs/ENCODERS.md).
struct BlockShape {
  int64_t width = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // 0: heads (grouped-query attention when fewer)
  int64_t head_dim = 0;  // 0: width / heads
  int64_t ffn = 0;       // 0: 2 * width
  bool gated = true;     // act(gate) * up, else act(fc1)
  bool gelu = false;     // GELU (tanh approximation), else SiLU
  bool qk_norm = false;  // RMSNorm of each head's queries and keys before RoPE

  int64_t kv() const { return kv_heads > 0 ? kv_heads : heads; }
  int64_t head() const { return head_dim > 0 ? head_dim : width / heads; }
  int64_t hidden() const { return ffn > 0 ? ffn : 2 * width; }
};

// Pre-norm transformer block: RMSNorm -> multi-head self-attention with RoPE -> RMSNorm -> MLP,
// both residual. `attention_bias` is added to the attention scores (0 or -inf), broadcastable to
// [B, heads, S, S]. Parameters are registered in the same order and with the same shapes for the
// default shape as before BlockShape existed, so seeded stand-ins keep their weights.
class EncoderBlockImpl : public torch::nn::Module {
 public:
  EncoderBlockImpl(int64_t width, int64_t heads);
  explicit EncoderBlockImpl(const BlockShape& shape);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& attention_bias);

 private:
  BlockShape shape_;
  RMSNorm attention_norm_{nullptr}, mlp_norm_{nullptr}, q_norm_{nullptr}, k_norm_{nullptr};
  torch::nn::Linear qkv_{nullptr}, out_{nullptr}, gate_up_{nullptr}, down_{nullptr};
};
TORCH_MODULE(EncoderBlock);

// Additive attention bias [B, 1, 1, S] from a key mask bool [B, S]: 0 where true, -inf where false.
at::Tensor key_padding_bias(const at::Tensor& key_mask, at::ScalarType dtype);

}  // namespace wam::models
