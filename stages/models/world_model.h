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

namespace wam::models {

// Widths and depths; presets live in configs/model/{tiny,small,base,paper}.json.
struct MoTConfig {
  int64_t latent_channels = 48;  // VAE latent channels (patchified (1,2,2) -> tokens)
  int64_t video_hidden = 3072;
  int64_t video_ffn = 14336;
  int64_t action_hidden = 1024;
  int64_t action_ffn = 4096;
  int64_t num_layers = 30;
  int64_t num_heads = 24;
  int64_t head_dim = 128;
  int64_t text_dim = 4096;  // T5 context width
  int64_t vlm_dim = 2048;   // VLM hidden width (action expert cross-attention)
  int64_t freq_dim = 256;   // timestep embedding
  int64_t action_dim = 80;
  int64_t proprio_dim = 80;
  int64_t future_delta_tokens = 96;  // must equal the latent raster's tokens per frame
  int64_t future_latent_frames = 2;  // video_latents frames after the current one
  double video_shift = 6.0;          // flow-matching timestep shift
  double action_shift = 1.0;
  double lambda_video = 0.5;
  double lambda_action = 1.0;
  double lambda_future_delta = 0.5;
  // Semantic alignment (the reference's future_delta.semantic_alignment): the future-delta query
  // tokens after layer semantic_student_layer are pulled (1 - cosine) towards the last future
  // frame's tokens after layer semantic_teacher_layer, in samples whose video sigma is at most
  // semantic_max_sigma. Layers are 0-based; a layer's feature is its output.
  bool semantic_alignment = true;
  int64_t semantic_student_layer = 8;
  int64_t semantic_teacher_layer = 20;
  double semantic_max_sigma = 0.5;
  double lambda_semantic = 0.1;
  // Activation checkpointing: 0 = none, k = recompute groups of k layers in backward.
  int64_t checkpoint_group = 0;

  // Reads a configs/model/*.json object; throws wam::Error naming the key on a bad value.
  static MoTConfig from_json(const nlohmann::json& j);
  // from_json on a file; errors name the file.
  static MoTConfig from_file(const std::string& path);
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
std::vector<int64_t> checkpoint_group_starts(int64_t num_layers, int64_t group_size,
                                             const std::vector<int64_t>& captured_layers);

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

namespace detail {
class TimestepEmbedderImpl;
class MoTLayerImpl;
class OutputHeadImpl;
struct LayerInputs;
struct LayerOutputs;
}  // namespace detail

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

 private:
  // Runs the layers in the groups of checkpoint_group_starts, checkpointed when
  // config_.checkpoint_group > 0 and grad is on.
  detail::LayerOutputs run_layers(at::Tensor video_tokens, at::Tensor action_tokens,
                                  const detail::LayerInputs& inputs);

  MoTConfig config_;
  bool fused_kernels_ = false;
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
