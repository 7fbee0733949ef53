// The training step itself, eager or captured once as a CUDA graph and replayed: forward, backward,
// clipping and the optimizer update, with the flow-matching noise drawn outside the model.
//
// Everything the compiled step must change between replays lives in device tensors (the optimizer's
// step count, the learning rate, the inputs, the noise), so one captured graph replays a correct
// step every time. The eager step runs the same code without capture, so eager and compiled
// training are numerically comparable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "models/world_model.h"
#include "train/losses.h"
#include "train/optimizer.h"

namespace wam::train {

// The generator the flow-matching noise is drawn from, on the training device.
at::Generator make_noise_generator(at::Device device, uint64_t seed);

// Pads the VLM context [B, S, D] and mask [B, S] on the right to `pad_to` tokens (mask false), so
// the compiled step sees one shape. Longer contexts are an error: they are never truncated.
void pad_vlm_context(models::TrainBatch& batch, int64_t pad_to);

// Where the compiled data-parallel step runs its collectives.
enum class CollectivePlacement {
  kInGraph,       // captured in the step's CUDA graph (NCCL), overlapped with backward
  kOutsideGraph,  // between a forward+backward graph and an update graph, after backward
};

struct StepOptions {
  double max_grad_norm = 1.0;
  bool autocast_bf16 = true;  // CUDA only
  // Compiled step with activation checkpointing: the share of the device's memory the step may
  // take (0: recompute every group). Warm-up measures the step's peak with every group recomputed
  // and with none, and recomputes only as many groups as the budget needs.
  double memory_budget = 0;
  CollectivePlacement collectives = CollectivePlacement::kInGraph;  // compiled data-parallel step
  // Compiled step: the MoT linear layers' products in FP8 (models/fp8_linear.h).
  bool fp8 = false;
  // Compiled step: captured once as a CUDA graph and replayed. Without, the same kernels are
  // launched op by op, slower, so that a profile ties each kernel to the op that launched it.
  bool cuda_graph = true;
};

// Called around the backward pass of every step: data-parallel gradient averaging
// (train/data_parallel.h). In the compiled step it is captured with the step, or, with
// set_deferred(true), only its copies are: the collectives then run between two graphs.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual void begin_backward() = 0;
  // The gradients averaged over the ranks (deferred: gathered, reduce_deferred() averages them).
  virtual void finish_backward() = 0;
  virtual void set_deferred(bool deferred) = 0;
  virtual void reduce_deferred() = 0;
  // Autograd accumulates a parameter's gradient on the stream current when its accumulator node
  // was made; called on the compiled step's capture stream before warm-up, so that capture never
  // makes another stream wait on it.
  virtual void rehook_on_current_stream() = 0;
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
  Losses step(const models::TrainBatch& batch, double lr, at::Generator& noise_gen);
  // On CUDA: the last step's time on the device, between CUDA events recorded before its input
  // copies and after its update (the first compiled step includes warm-up and capture). Read
  // after the step's losses, so it costs no extra synchronisation. None on the CPU.
  std::optional<double> last_device_ms() const { return last_device_ms_; }

  bool compiled() const { return compiled_; }
  // After the first compiled step: how the memory budget was spent ("" when there was none).
  const std::string& recompute_note() const { return recompute_note_; }
  // Averages gradients between backward and clipping (nullptr: none). Set before the first step.
  void set_gradient_sync(GradientSync* sync) { sync_ = sync; }

 private:
  models::LossTerms forward_backward(const models::TrainBatch& batch,
                                     const models::FlowNoise& noise);
  void update();
  models::LossTerms eager_step(const models::TrainBatch& batch, at::Generator& noise_gen);
#if WAM_WITH_CUDA
  models::LossTerms graph_step(const models::TrainBatch& batch, at::Generator& noise_gen);
  models::LossTerms uncaptured_step(const models::TrainBatch& batch, at::Generator& noise_gen);
  void capture(const models::TrainBatch& batch);
  void warm_up_step(const models::TrainBatch& inputs, const models::FlowNoise& noise,
                    bool with_sync);
  void plan_recomputation(const models::TrainBatch& inputs, const models::FlowNoise& noise);
  struct Graph;
  std::unique_ptr<Graph> graph_;
  struct StepEvents;
  std::unique_ptr<StepEvents> events_;
  bool recomputation_planned_ = false;  // uncaptured_step plans it on its first batch
#endif
  std::optional<double> last_device_ms_;

  models::WorldActionModel model_;
  AdamW& optimizer_;
  at::Device device_;
  StepOptions options_;
  bool compiled_;
  std::string tunableop_results_;
  std::string recompute_note_;
  GradientSync* sync_ = nullptr;
};

}  // namespace wam::train
