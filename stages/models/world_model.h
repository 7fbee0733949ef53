// The world action model's training interface: a MoT (mixture of transformers: a video expert and
// an action expert joined in one masked self-attention per layer) and its flow-matching loss.
// Randomness (noise, timesteps) is an explicit input so a whole step can be captured as a CUDA
// graph over static buffers and replayed.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "wam/params.h"

namespace wam::models {

// Widths and depths; presets live in configs/model/{tiny,small,base,paper}.json.
struct MoTConfig {
  int64_t latent_channels = 48;
  int64_t video_hidden = 3072;
  int64_t video_ffn = 14336;
  int64_t action_hidden = 1024;
  int64_t action_ffn = 4096;
  int64_t num_layers = 30;
  int64_t num_heads = 24;
  int64_t head_dim = 128;
  int64_t text_dim = 4096;
  int64_t vlm_dim = 2048;
  int64_t freq_dim = 256;
  int64_t action_dim = 80;
  int64_t proprio_dim = 80;
  int64_t future_delta_tokens = 96;
  int64_t future_latent_frames = 2;
  double video_shift = 6.0;
  double action_shift = 1.0;
  double lambda_video = 0.5;
  double lambda_action = 1.0;
  double lambda_future_delta = 0.5;
  bool semantic_alignment = true;
  int64_t semantic_student_layer = 8;
  int64_t semantic_teacher_layer = 20;
  double semantic_max_sigma = 0.5;
  double lambda_semantic = 0.1;
  int64_t activation_checkpoint_group = 0;
  std::string notes;  // free text of a preset file; not part of the model

  template <class V>
  void visit(V& v) {
    v("latent_channels", latent_channels, "VAE latent channels (patchified (1,2,2) into tokens).",
      Min{1});
    v("video_hidden", video_hidden, "Video expert width.", Min{1});
    v("video_ffn", video_ffn, "Video expert feed-forward width.", Min{1});
    v("action_hidden", action_hidden, "Action expert width.", Min{1});
    v("action_ffn", action_ffn, "Action expert feed-forward width.", Min{1});
    v("num_layers", num_layers, "MoT layers.", Min{1});
    v("num_heads", num_heads, "Attention heads (both experts).", Min{1});
    v("head_dim", head_dim, "Attention head width (even, >= 6: 3-D RoPE).", Min{1});
    v("text_dim", text_dim, "T5 context width.", Min{1});
    v("vlm_dim", vlm_dim, "VLM hidden width (the action expert's cross-attention).", Min{1});
    v("freq_dim", freq_dim, "Timestep embedding width (even).", Min{2});
    v("action_dim", action_dim, "Action width.", Min{1});
    v("proprio_dim", proprio_dim, "Proprio width.", Min{1});
    v("future_delta_tokens", future_delta_tokens,
      "Future-delta queries; must equal the latent raster's tokens per frame.", Min{1});
    v("future_latent_frames", future_latent_frames, "video_latents frames after the current one.",
      Min{1});
    v("video_shift", video_shift, "Flow-matching timestep shift of the video (> 0).", Min{0.0});
    v("action_shift", action_shift, "Flow-matching timestep shift of the actions (> 0).", Min{0.0});
    v("lambda_video", lambda_video, "Video loss weight.", Min{0.0});
    v("lambda_action", lambda_action, "Action loss weight.", Min{0.0});
    v("lambda_future_delta", lambda_future_delta, "Future-delta loss weight.", Min{0.0});
    // The reference's future_delta.semantic_alignment: the future-delta query tokens after layer
    // semantic_student_layer are pulled (1 - cosine) towards the last future frame's tokens after
    // layer semantic_teacher_layer, in samples whose video sigma is at most semantic_max_sigma.
    v("semantic_alignment", semantic_alignment,
      "Semantic alignment of the future-delta queries with a deeper layer's future frame.");
    v("semantic_student_layer", semantic_student_layer,
      "Layer (0-based) whose future-delta query tokens are pulled.", Min{0});
    v("semantic_teacher_layer", semantic_teacher_layer,
      "Deeper layer (0-based) whose last future frame's tokens they are pulled towards.", Min{0});
    v("semantic_max_sigma", semantic_max_sigma,
      "Only samples whose video sigma is at most this count.", Min{0.0});
    v("lambda_semantic", lambda_semantic, "Semantic alignment loss weight.", Min{0.0});
    v("checkpoint_group", activation_checkpoint_group,
      "Activation checkpointing: recompute groups of this many layers in backward (0: none).",
      Min{0});
    v("notes", notes, "Free text: what the preset is for (not part of the model).");
  }
  // Rules between fields.
  void check(ParamChecker& c) const;

  // Reads a configs/model/*.json object; throws wam::Error naming every bad key.
  static MoTConfig from_json(const nlohmann::json& j);
  // from_json on a file; errors name the file.
  static MoTConfig from_file(const std::string& path);
  // The model's fields, without the notes.
  nlohmann::json to_json() const;
  // Trainable parameters of WorldActionModel(*this), computed without allocating the model.
  int64_t parameter_count() const;
  // Layers whose video-stream output a loss term reads: student then teacher when semantic
  // alignment is on, else none.
  std::vector<int64_t> captured_layers() const;
};

// The first layer of each activation-checkpoint group: every group_size layers (0: one group),
// plus a split after each captured layer, so that its output is a group output (the reference's
// compile path: 30 layers in groups of 3 with captures at 8 and 20 split at 9 and 21).
std::vector<int64_t> activation_checkpoint_group_starts(
    int64_t num_layers, int64_t group_size, const std::vector<int64_t>& captured_layers);

// One training batch on the model's device (B = batch size). Latents come from VaeEncode or the
// latent cache; context from TextEmbed; vlm_* from VlmEncode.
struct TrainBatch {
  at::Tensor video_latents;      // [B, C, 3, h, w]: frame 0 current (clean), 1.. future
  at::Tensor anchor_latents;     // [B, C, 1, h, w]  clean condition
  at::Tensor recent_latents;     // [B, C, 1, h, w]  clean condition
  at::Tensor recent_is_pad;      // bool [B, 1]
  at::Tensor context;            // [B, L, text_dim]
  at::Tensor context_mask;       // bool [B, L]
  at::Tensor vlm_context;        // [B, S, vlm_dim]
  at::Tensor vlm_mask;           // bool [B, S]
  at::Tensor action;             // [B, 32, 80]
  at::Tensor action_is_pad;      // bool [B, 32]
  at::Tensor action_dim_is_pad;  // bool [B, 80]
  at::Tensor proprio;            // [B, 32, 80]  (row 0 is projected into one context token)
};

// The random draws of one flow-matching step, sampled outside the model.
struct FlowNoise {
  at::Tensor video_noise;   // like video_latents
  at::Tensor video_sigma;   // [B] in (0, 1], shifted by video_shift
  at::Tensor action_noise;  // like action
  at::Tensor action_sigma;  // [B], shifted by action_shift
};

FlowNoise sample_flow_noise(const TrainBatch& batch, const MoTConfig& config, at::Generator gen);

struct LossTerms {
  at::Tensor total, video, action, future_delta, semantic;  // scalars
  // The features semantic alignment compared, [B, tokens per frame, video_hidden], kept for
  // inspection (undefined when it is off): the delta queries after the student layer and the
  // last future frame after the teacher layer (detached).
  at::Tensor semantic_student, semantic_teacher;
};

class Fp8Linears;

namespace detail {
class TimestepEmbedderImpl;
class MoTLayerImpl;
class OutputHeadImpl;
struct LayerInputs;
struct LayerOutputs;
}  // namespace detail

// A bool mask `allowed` [B, 1, 1 or Nq, Nk] (true = may attend) as the additive bias [B, 1, Nq, Nk]
// of `dtype` that the compiled step hands SDPA: 0 where a key may be attended, -inf elsewhere.
at::Tensor attention_bias(const at::Tensor& allowed, int64_t queries, at::ScalarType dtype);

class WorldActionModelImpl : public torch::nn::Module {
 public:
  explicit WorldActionModelImpl(const MoTConfig& config);
  // Noises the future latent frames and the action chunk, predicts velocities, returns the masked
  // losses: total = lambda_video * video + lambda_action * action + lambda_future_delta * delta
  // + lambda_semantic * semantic.
  LossTerms loss(const TrainBatch& batch, const FlowNoise& noise);
  const MoTConfig& config() const { return config_; }
  int64_t parameter_count() const;
  // Routes the q/k norms and RoPE through the fused CUDA kernels (models/fused_norm.h) where they
  // apply; TrainStep's compiled mode turns this on. Same maths, other rounding.
  void set_fused_kernels(bool on) { fused_kernels_ = on; }
  // The fused kernels' linear layers of the MoT with FP8 products where they apply
  // (models/fp8_linear.h; TrainStep's precision "fp8"), their delayed scaling tagged by
  // `steps_done`, the optimizer's float32 device step count. Undefined: bf16 products.
  void set_fp8(const at::Tensor& steps_done);
  // Activation checkpointing recomputes only the first `groups` checkpoint groups in backward
  // (-1: all of them); the later groups keep their activations, trading memory for the second
  // forward. StepRunner's compiled step sets it from a memory budget.
  void set_recomputed_groups(int64_t groups) { recomputed_groups_ = groups; }
  // Layers in each group of activation_checkpoint_group_starts, in order.
  std::vector<int64_t> checkpoint_group_layers() const;

 private:
  // Runs the layers in the groups of activation_checkpoint_group_starts, recomputed in backward
  // when config_.activation_checkpoint_group > 0 and grad is on.
  detail::LayerOutputs run_layers(at::Tensor video_tokens, at::Tensor action_tokens,
                                  const detail::LayerInputs& inputs);
  // What the layers of loss()'s step read besides the two streams: latent frames of hp x wp
  // patches, `video_tokens` tokens on the video stream.
  detail::LayerInputs layer_inputs(const TrainBatch& batch, const at::Tensor& video_t_mod,
                                   const at::Tensor& action_t_mod, int64_t hp, int64_t wp,
                                   int64_t video_tokens);

  MoTConfig config_;
  bool fused_kernels_ = false;
  std::shared_ptr<Fp8Linears> fp8_;  // set_fp8
  int64_t recomputed_groups_ = -1;
  torch::nn::Linear patch_embed_{nullptr};         // (C*2*2) -> video_hidden
  at::Tensor delta_queries_;                       // [future_delta_tokens, video_hidden]
  torch::nn::Linear action_embed_{nullptr};        // action_dim -> action_hidden
  torch::nn::Linear proprio_to_text_{nullptr};     // proprio row 0 -> one text-context token
  torch::nn::Linear proprio_to_vlm_{nullptr};      // proprio row 0 -> one VLM-context token
  torch::nn::Sequential text_embedding_{nullptr};  // text_dim -> video_hidden (Wan)
  std::shared_ptr<detail::TimestepEmbedderImpl> video_time_, action_time_;
  torch::nn::ModuleList layers_{nullptr};  // detail::MoTLayerImpl
  std::shared_ptr<detail::OutputHeadImpl> video_head_, delta_head_, action_head_;
};
TORCH_MODULE(WorldActionModel);

}  // namespace wam::models
