// The training machinery behind the TrainStep stage, kept apart so that it is testable without the
// stage: the learning-rate schedule, a capturable AdamW and gradient clipping, checkpoints, and the
// step itself (eager, or captured once as a CUDA graph and replayed).
//
// Everything the compiled step must change between replays lives in device tensors (the optimizer's
// step count, the learning rate, the inputs, the noise), so one captured graph replays a correct
// step every time. The eager step runs the same code without capture, so eager and compiled
// training are numerically comparable.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "models/world_model.h"

namespace wam::train {

// The generator the flow-matching noise is drawn from, on the training device.
at::Generator make_noise_generator(at::Device device, uint64_t seed);

// Linear warmup over ceil(warmup_ratio * total_steps) steps to the peak learning rate, then cosine
// annealing to min_lr_ratio * peak at total_steps (the reference's LinearLR + CosineAnnealingLR).
struct LrSchedule {
  double peak = 1e-4;
  double warmup_ratio = 0.05;
  double min_lr_ratio = 0.01;
  int64_t total_steps = 1;

  int64_t warmup_steps() const;
  // The learning rate of optimizer step `step` (1-based: the first step is 1).
  double at(int64_t step) const;
};

// AdamW written with tensor ops on a device-side step count and learning rate, so that a captured
// CUDA graph advances the bias correction and follows the schedule on every replay (the same idea
// as ATen's fused AdamW with a tensor step). Matches torch::optim::AdamW (decoupled weight decay).
struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  AdamW(std::vector<at::Tensor> params, AdamWOptions options);

  // Writes the learning rate of the next step into the device tensor (outside any capture).
  void set_lr(double lr);
  // One update from the parameters' .grad(); capturable (no host synchronisation).
  void step();

  int64_t step_count() const;  // reads the device step (synchronises)
  const std::vector<at::Tensor>& params() const { return params_; }
  const std::vector<at::Tensor>& exp_avg() const { return exp_avg_; }
  const std::vector<at::Tensor>& exp_avg_sq() const { return exp_avg_sq_; }
  const at::Tensor& step_tensor() const { return step_; }

 private:
  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_;
  AdamWOptions options_;
  at::Tensor step_;  // float32 scalar on the parameters' device
  at::Tensor lr_;    // float32 scalar on the parameters' device
};

// Scales the gradients in place so that their global L2 norm is at most max_norm; returns the norm
// before clipping as a device scalar. Same result as torch::nn::utils::clip_grad_norm_, without its
// host synchronisation, so it can be captured.
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

// What a checkpoint holds besides the model and optimizer: the step count (which is also the
// schedule's position) and the noise generator's state.
struct TrainProgress {
  int64_t step = 0;
  at::Tensor noise_rng_state;  // uint8, from at::Generator::get_state()
};

// Writes model parameters and buffers, optimizer state, progress and the model config to
// `dir/step_<N>.pt` (through a .tmp file and a rename), then points `dir/latest` at it. Returns
// the checkpoint's path.
std::string save_checkpoint(const std::string& dir, const models::WorldActionModel& model,
                            const AdamW& optimizer, const TrainProgress& progress);

// Loads a checkpoint written by save_checkpoint into the model and optimizer (copied into their
// existing tensors, so captured graphs stay valid). `path` is a step_<N>.pt file or a checkpoint
// directory (then its `latest` pointer is followed). Throws wam::Error when the file is missing or
// was written for another model config.
TrainProgress load_checkpoint(const std::string& path, models::WorldActionModel& model,
                              AdamW& optimizer);

// Where TunableOp keeps the GEMM tuning results of this GPU, Torch version and model config:
// $WAM_COMPILE_CACHE/tunableop/<gpu>_torch<version>_<config hash>.csv.
std::string tunableop_results_path(const std::string& gpu_name, const models::MoTConfig& config);
// FNV-1a 64 of the config's canonical JSON, as 16 hex digits (stable across runs and builds).
std::string config_hash(const models::MoTConfig& config);

// Pads the VLM context [B, S, D] and mask [B, S] on the right to `pad_to` tokens (mask false), so
// the compiled step sees one shape. Longer contexts are an error: they are never truncated.
void pad_vlm_context(models::TrainBatch& batch, int64_t pad_to);

struct StepOptions {
  double max_grad_norm = 1.0;
  bool autocast_bf16 = true;  // CUDA only
};

// Runs training steps on one device: eager, or (CUDA) one captured graph replayed per step.
class StepRunner {
 public:
  // `compiled` requests CUDA-graph capture; it is honoured only on a CUDA device in a build with
  // the CUDA code paths (see compiled()).
  // `tunableop_results`: where TunableOp reads and writes GEMM results ("" = no TunableOp).
  StepRunner(models::WorldActionModel model, AdamW& optimizer, at::Device device,
             StepOptions options, bool compiled, std::string tunableop_results);
  ~StepRunner();

  // One step: lr into the optimizer, noise from `noise_gen`, forward, backward, clip, update.
  // Returns the loss terms as host doubles (total, video, action, future_delta, semantic).
  std::vector<double> step(const models::TrainBatch& batch, double lr, at::Generator& noise_gen);

  bool compiled() const { return compiled_; }

 private:
  models::LossTerms forward_backward_update(const models::TrainBatch& batch,
                                            const models::FlowNoise& noise);
  std::vector<double> eager_step(const models::TrainBatch& batch, at::Generator& noise_gen);
#if WAM_WITH_CUDA
  std::vector<double> graph_step(const models::TrainBatch& batch, at::Generator& noise_gen);
  void capture(const models::TrainBatch& batch);
  struct Graph;
  std::unique_ptr<Graph> graph_;
#endif

  models::WorldActionModel model_;
  AdamW& optimizer_;
  at::Device device_;
  StepOptions options_;
  bool compiled_;
  std::string tunableop_results_;
};

// Steps/s and samples/s over the last 10 step intervals, as the reference's speed_history.
class SpeedMeter {
 public:
  void record(int64_t step, double seconds);
  // 0 until two steps were recorded.
  double steps_per_second() const;

 private:
  std::deque<std::pair<int64_t, double>> history_;  // (step, time): at most 11 entries
};

// "HH:MM:SS" (hours may exceed 24); "--:--:--" when unknown.
std::string format_eta(double seconds);

}  // namespace wam::train
