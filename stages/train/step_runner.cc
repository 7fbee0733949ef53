#include "train/step_runner.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <vector>

#include "common/capture_gate.h"
#include "wam/error.h"

#if WAM_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/tunable/Tunable.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace wam::train {
namespace fs = std::filesystem;

#if WAM_WITH_CUDA
constexpr bool kCudaCodePaths = true;
#else
constexpr bool kCudaCodePaths = false;
#endif

at::Generator make_noise_generator(at::Device device, uint64_t seed) {
#if WAM_WITH_CUDA
  if (device.is_cuda()) {
    at::Generator gen = at::cuda::detail::createCUDAGenerator(device.index());
    gen.set_current_seed(seed);
    return gen;
  }
#endif
  return at::detail::createCPUGenerator(seed);
}

void pad_vlm_context(models::TrainBatch& batch, int64_t pad_to) {
  const int64_t length = batch.vlm_context.size(1);
  if (length > pad_to) {
    throw Error("VLM context length " + std::to_string(length) + " exceeds vlm_context_pad_to=" +
                std::to_string(pad_to) + ": increase it; the context will not be truncated.");
  }
  if (length == pad_to) return;
  const int64_t rows = batch.vlm_context.size(0);
  batch.vlm_context = torch::cat(
      {batch.vlm_context, torch::zeros({rows, pad_to - length, batch.vlm_context.size(2)},
                                       batch.vlm_context.options())},
      1);
  batch.vlm_mask = torch::cat(
      {batch.vlm_mask, torch::zeros({rows, pad_to - length}, batch.vlm_mask.options())}, 1);
}

namespace {

void reset_grads(const std::vector<at::Tensor>& params) {
  for (const at::Tensor& p : params) p.mutable_grad() = at::Tensor();
}

#if WAM_WITH_CUDA
// bf16 autocast on CUDA for the scope (thread-local, so set and undone around each forward).
class CudaAutocast {
 public:
  CudaAutocast(bool enabled, bool cache) : enabled_(enabled) {
    if (!enabled_) return;
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    // Cached weight casts would be freed at scope exit, under a captured graph's feet.
    at::autocast::set_autocast_cache_enabled(cache);
    at::autocast::increment_nesting();
  }
  ~CudaAutocast() {
    if (!enabled_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::set_autocast_cache_enabled(true);
  }

 private:
  bool enabled_;
};
#endif

}  // namespace

#if WAM_WITH_CUDA
namespace {

// A non-blocking stream of the step's own, not one of LibTorch's pool: the pool's streams are
// handed out round robin, and work that another thread queues on the capturing stream (an NVDEC
// reader's, Augment's, HostToDevice's) would be captured or invalidate the capture. Destroyed with
// its owner (cudaStreamDestroy lets queued work finish first).
struct OwnStream {
  OwnStream(c10::DeviceIndex device, bool greatest_priority)
      : stream(make(device, greatest_priority)) {}
  ~OwnStream() { cudaStreamDestroy(stream.stream()); }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;

  static c10::cuda::CUDAStream make(c10::DeviceIndex device, bool greatest_priority) {
    const c10::cuda::CUDAGuard guard(device);
    int least = 0, greatest = 0;
    C10_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t raw = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithPriority(&raw, cudaStreamNonBlocking,
                                                greatest_priority ? greatest : least));
    return c10::cuda::getStreamFromExternal(raw, device);
  }
  c10::cuda::CUDAStream stream;
};

}  // namespace

struct StepRunner::Graph {
  explicit Graph(c10::DeviceIndex device) : replay_stream(device, /*greatest_priority=*/true) {}
  // The replays run here, at the device's greatest priority: the data path's kernels (NVDEC's
  // colour conversion, Augment on the GPU) queue on default-priority streams, so when both wait
  // for SMs the step's blocks go first (docs/KERNELS.md, "The step beside the data path").
  OwnStream replay_stream;
  at::cuda::CUDAGraph graph;
  // With the collectives outside the graph: `graph` is forward and backward, this the update.
  std::unique_ptr<at::cuda::CUDAGraph> update_graph;
  models::TrainBatch inputs;  // static buffers the graph reads
  models::FlowNoise noise;    // static buffers the graph reads
  models::LossTerms outputs;  // written by every replay
};
#endif

StepRunner::StepRunner(models::WorldActionModel model, AdamW& optimizer, at::Device device,
                       StepOptions options, bool compiled, std::string tunableop_results)
    : model_(std::move(model)),
      optimizer_(optimizer),
      device_(device),
      options_(options),
      compiled_(compiled && device.is_cuda() && kCudaCodePaths),
      tunableop_results_(std::move(tunableop_results)) {
  // The compiled step runs the fused kernels, as the reference's compiled layers run Inductor's.
  model_->set_fused_kernels(compiled_);
  model_->set_fp8(compiled_ && options_.fp8 ? optimizer_.step_tensor() : at::Tensor());
#if WAM_WITH_CUDA
  if (compiled_ && !tunableop_results_.empty()) {
    fs::create_directories(fs::path(tunableop_results_).parent_path());
    auto* tuning = at::cuda::tunable::getTuningContext();
    tuning->EnableTunableOp(true);
    tuning->SetFilename(tunableop_results_);
    if (fs::exists(tunableop_results_)) tuning->ReadFile(tunableop_results_);
    tuning->EnableTuning(true);
  }
#endif
}

StepRunner::~StepRunner() = default;

#if WAM_WITH_CUDA
struct StepRunner::StepEvents {
  at::cuda::CUDAEvent begin{cudaEventDefault}, end{cudaEventDefault};  // timing enabled
};
#endif

Losses StepRunner::step(const models::TrainBatch& batch, double lr, at::Generator& noise_gen) {
  optimizer_.set_lr(lr);
#if WAM_WITH_CUDA
  if (device_.is_cuda()) {
    if (!events_) events_ = std::make_unique<StepEvents>();
    events_->begin.record();
    const models::LossTerms terms = !compiled_            ? eager_step(batch, noise_gen)
                                    : options_.cuda_graph ? graph_step(batch, noise_gen)
                                                          : uncaptured_step(batch, noise_gen);
    events_->end.record();
    const Losses losses = read_losses(terms);
    last_device_ms_ = events_->begin.elapsed_time(events_->end);
    return losses;
  }
#endif
  return read_losses(eager_step(batch, noise_gen));
}

models::LossTerms StepRunner::forward_backward(const models::TrainBatch& batch,
                                               const models::FlowNoise& noise) {
  models::LossTerms loss;
  {
#if WAM_WITH_CUDA
    CudaAutocast autocast(options_.autocast_bf16 && device_.is_cuda(), /*cache=*/!compiled_);
#endif
    loss = model_->loss(batch, noise);
  }
  if (sync_) sync_->begin_backward();
  loss.total.backward();
  if (sync_) sync_->finish_backward();
  return loss;
}

// The compiled step clips inside the fused update; eager keeps the separate clipping pass, as the
// reference's baseline.
void StepRunner::update() {
  if (compiled_) {
    optimizer_.clip_and_step(options_.max_grad_norm);
    return;
  }
  clip_grad_norm(optimizer_.params(), options_.max_grad_norm);
  optimizer_.step();
}

models::LossTerms StepRunner::eager_step(const models::TrainBatch& batch,
                                         at::Generator& noise_gen) {
  reset_grads(optimizer_.params());
  const models::FlowNoise noise = models::sample_flow_noise(batch, model_->config(), noise_gen);
  const models::LossTerms loss = forward_backward(batch, noise);
  update();
  return loss;
}

#if WAM_WITH_CUDA
namespace {

constexpr int kWarmupIterations = 3;

std::vector<at::Tensor*> batch_fields(models::TrainBatch& b) {
  return {&b.video_latents, &b.anchor_latents, &b.recent_latents,    &b.recent_is_pad,
          &b.context,       &b.context_mask,   &b.vlm_context,       &b.vlm_mask,
          &b.action,        &b.action_is_pad,  &b.action_dim_is_pad, &b.proprio};
}

void copy_batch(models::TrainBatch& to, const models::TrainBatch& from) {
  auto targets = batch_fields(to);
  auto sources = batch_fields(const_cast<models::TrainBatch&>(from));
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i]->sizes() != sources[i]->sizes()) {
      std::ostringstream message;
      message << "TrainStep (compiled): batch field " << i << " changed shape from "
              << targets[i]->sizes() << " to " << sources[i]->sizes()
              << "; the captured step needs fixed shapes (set drop_last on Collate)";
      throw Error(message.str());
    }
    targets[i]->copy_(*sources[i], /*non_blocking=*/true);
  }
}

void copy_noise(models::FlowNoise& to, const models::FlowNoise& from) {
  to.video_noise.copy_(from.video_noise);
  to.video_sigma.copy_(from.video_sigma);
  to.action_noise.copy_(from.action_noise);
  to.action_sigma.copy_(from.action_sigma);
}

}  // namespace

// `with_sync`: the gradient sync runs too (it learns the backward's order on its first pass and
// sets up its communicator before capture), its averaged gradients discarded with the rest.
void StepRunner::warm_up_step(const models::TrainBatch& inputs, const models::FlowNoise& noise,
                              bool with_sync) {
  reset_grads(optimizer_.params());
  models::LossTerms loss;
  {
    CudaAutocast autocast(options_.autocast_bf16, /*cache=*/false);
    loss = model_->loss(inputs, noise);
  }
  if (with_sync) sync_->begin_backward();
  loss.total.backward();
  if (with_sync) {
    sync_->finish_backward();
    sync_->reduce_deferred();
  }
  clip_grad_norm(optimizer_.params(), options_.max_grad_norm);
}

// Keeping a group's activations instead of recomputing them raises the step's peak by at most
// its share of the difference between two measured warm-up steps, every group recomputed and
// none (the peak grows with the kept layers no faster than linearly: it may first sit elsewhere,
// in the optimizer say). Keeps the most layers, from the last group back, that fit in the budget
// by that bound. Runs on the current (side) stream, before the warm-up proper.
void StepRunner::plan_recomputation(const models::TrainBatch& inputs,
                                    const models::FlowNoise& noise) {
  const std::vector<int64_t> layers = model_->checkpoint_group_layers();
  const auto groups = static_cast<int64_t>(layers.size());
  const int device = device_.index() >= 0 ? device_.index() : c10::cuda::current_device();
  auto peak_bytes = [&](int64_t recomputed) {
    model_->set_recomputed_groups(recomputed);
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device);
    warm_up_step(inputs, noise, /*with_sync=*/false);
    c10::cuda::device_synchronize();
    return static_cast<double>(
        c10::cuda::CUDACachingAllocator::getDeviceStats(device).allocated_bytes[0].peak);
  };
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double budget = options_.memory_budget *
                        static_cast<double>(at::cuda::getDeviceProperties(device)->totalGlobalMem);
  const double all = peak_bytes(groups);
  double none = -1;
  try {
    none = peak_bytes(0);
  } catch (const c10::OutOfMemoryError&) {
    // No measurement: every group stays recomputed.
  }
  int64_t recomputed = groups;
  double expected = all;
  if (none >= 0) {
    double total_layers = 0, kept_layers = 0;
    for (int64_t n : layers) total_layers += static_cast<double>(n);
    const double per_layer = std::max(0.0, (none - all) / total_layers);
    while (recomputed > 0 &&
           all + per_layer * (kept_layers + static_cast<double>(layers[recomputed - 1])) <=
               budget) {
      kept_layers += static_cast<double>(layers[--recomputed]);
    }
    expected = recomputed == 0 ? none : all + per_layer * kept_layers;
  }
  model_->set_recomputed_groups(recomputed);
  // The probes' cached blocks go back to the device before the graph takes its own pool.
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
  char none_text[32] = "out of memory";
  if (none >= 0) std::snprintf(none_text, sizeof(none_text), "%.2f GiB", none / kGiB);
  char note[320];
  std::snprintf(note, sizeof(note),
                "memory budget %.1f GiB: recomputing %lld of %lld checkpoint groups (warm-up peak "
                "%.2f GiB with all recomputed, %s with none; expected %.2f GiB)",
                budget / kGiB, static_cast<long long>(recomputed), static_cast<long long>(groups),
                all / kGiB, none_text, expected / kGiB);
  recompute_note_ = note;
}

// Warm-up on a side stream (tunes GEMMs through TunableOp, initialises cuBLAS workspaces and the
// autograd engine) with forward and backward only, so the training state is untouched; then the
// whole step, optimizer included, is captured once. Noise for the warm-up comes from its own
// generator: the training noise sequence is the same as eager's.
void StepRunner::capture(const models::TrainBatch& batch) {
  graph_ = std::make_unique<Graph>(device_.index());
  auto inputs = batch_fields(graph_->inputs);
  auto sources = batch_fields(const_cast<models::TrainBatch&>(batch));
  for (size_t i = 0; i < inputs.size(); ++i) *inputs[i] = sources[i]->clone();
  at::Generator warmup_gen = make_noise_generator(device_, 0);
  graph_->noise = models::sample_flow_noise(graph_->inputs, model_->config(), warmup_gen);

  const OwnStream own(device_.index(), /*greatest_priority=*/false);
  c10::cuda::CUDAStream side = own.stream;
  c10::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream(device_.index());
  at::cuda::CUDAEvent ready;
  ready.record(main);
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    if (sync_) sync_->rehook_on_current_stream();
    if (options_.memory_budget > 0 && model_->config().activation_checkpoint_group > 0) {
      plan_recomputation(graph_->inputs, graph_->noise);
    }
    if (sync_) sync_->set_deferred(options_.collectives == CollectivePlacement::kOutsideGraph);
    for (int i = 0; i < kWarmupIterations; ++i) {
      warm_up_step(graph_->inputs, graph_->noise, /*with_sync=*/sync_ != nullptr);
    }
  }
  if (!tunableop_results_.empty()) {
    auto* tuning = at::cuda::tunable::getTuningContext();
    // Capture must not benchmark; it uses the tuned results. LibTorch 2.11 appends each tuned
    // GEMM to the file set with SetFilename as it is found, so nothing is left to write here.
    tuning->EnableTuning(false);
  }
  at::cuda::CUDAEvent warm;
  warm.record(side);
  warm.block(main);
  // Captured with no gradients allocated: the captured backward writes fresh ones on every replay.
  reset_grads(optimizer_.params());
  {
    // No other thread of the data path touches the GPU while the step is captured
    // (common/capture_gate.h).
    const auto alone = capture_gate().capture();
    c10::cuda::CUDAStreamGuard guard(side);
    graph_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    graph_->outputs = forward_backward(graph_->inputs, graph_->noise);
    if (sync_ && options_.collectives == CollectivePlacement::kOutsideGraph) {
      graph_->graph.capture_end();
      // The update reads the gradients from the sync's buckets, averaged in place between the
      // two replays.
      graph_->update_graph = std::make_unique<at::cuda::CUDAGraph>();
      graph_->update_graph->capture_begin(graph_->graph.pool(), cudaStreamCaptureModeThreadLocal);
      update();
      graph_->update_graph->capture_end();
    } else {
      update();
      graph_->graph.capture_end();
    }
  }
  at::cuda::CUDAEvent captured;
  captured.record(side);
  captured.block(main);
}

// The compiled step's kernels launched op by op (StepOptions::cuda_graph off), with the
// recomputation planned on the first batch as capture plans it on its own.
models::LossTerms StepRunner::uncaptured_step(const models::TrainBatch& batch,
                                              at::Generator& noise_gen) {
  if (!recomputation_planned_) {
    recomputation_planned_ = true;
    if (options_.memory_budget > 0 && model_->config().activation_checkpoint_group > 0) {
      at::Generator warmup_gen = make_noise_generator(device_, 0);
      plan_recomputation(batch, models::sample_flow_noise(batch, model_->config(), warmup_gen));
    }
  }
  return eager_step(batch, noise_gen);
}

models::LossTerms StepRunner::graph_step(const models::TrainBatch& batch,
                                         at::Generator& noise_gen) {
  if (!graph_) capture(batch);
  // The batch was made on the caller's stream; what the caller does next waits for the replay.
  const c10::cuda::CUDAStream caller = at::cuda::getCurrentCUDAStream(device_.index());
  const c10::cuda::CUDAStream replay = graph_->replay_stream.stream;
  at::cuda::CUDAEvent batch_ready, replayed;
  batch_ready.record(caller);
  batch_ready.block(replay);
  {
    c10::cuda::CUDAStreamGuard guard(replay);
    copy_batch(graph_->inputs, batch);
    copy_noise(graph_->noise,
               models::sample_flow_noise(graph_->inputs, model_->config(), noise_gen));
    graph_->graph.replay();
    if (graph_->update_graph) {
      sync_->reduce_deferred();
      graph_->update_graph->replay();
    }
  }
  replayed.record(replay);
  replayed.block(caller);
  return graph_->outputs;
}
#endif

}  // namespace wam::train
