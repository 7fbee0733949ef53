#include "train/train_loop.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <torch/version.h>

#include "wam/config.h"
#include "wam/error.h"
#include "wam/metrics.h"

#if WAM_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/tunable/Tunable.h>
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

int64_t LrSchedule::warmup_steps() const {
  // The epsilon keeps 0.05 * 100 at 5 despite binary rounding.
  return static_cast<int64_t>(std::ceil(warmup_ratio * static_cast<double>(total_steps) - 1e-9));
}

double LrSchedule::at(int64_t step) const {
  const int64_t warmup = warmup_steps();
  if (step <= warmup) return peak * static_cast<double>(step) / static_cast<double>(warmup);
  const double min_lr = peak * min_lr_ratio;
  const int64_t decay_steps = total_steps - warmup;
  if (decay_steps <= 0) return min_lr;
  const double progress =
      std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(decay_steps));
  return min_lr + (peak - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(std::vector<at::Tensor> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  const at::Device device = params_.empty() ? at::Device(at::kCPU) : params_.front().device();
  for (const at::Tensor& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
  const auto scalar = at::TensorOptions().dtype(at::kFloat).device(device);
  step_ = torch::zeros({}, scalar);
  lr_ = torch::zeros({}, scalar);
}

void AdamW::set_lr(double lr) { lr_.fill_(lr); }

// ATen's fused AdamW (LibTorch >= 2.0, CUDA): one multi-tensor kernel reads each parameter,
// gradient and moment once, where the per-tensor ops below make about eleven passes; it reads the
// learning rate and step from device tensors, so it stays correct under graph replay.
#if WAM_WITH_CUDA && TORCH_VERSION_MAJOR >= 2
#define WAM_FUSED_ADAMW 1
#endif

void AdamW::step() {
  torch::NoGradGuard no_grad;
  step_.add_(1);
#ifdef WAM_FUSED_ADAMW
  if (step_.is_cuda()) {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!params_[i].grad().defined()) continue;
      params.push_back(params_[i]);
      grads.push_back(params_[i].grad());
      exp_avgs.push_back(exp_avg_[i]);
      exp_avg_sqs.push_back(exp_avg_sq_[i]);
    }
    // Every parameter shares the one step count.
    const std::vector<at::Tensor> steps(params.size(), step_);
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr_,
                      options_.beta1, options_.beta2, options_.weight_decay, options_.eps,
                      /*amsgrad=*/false, /*maximize=*/false);
    return;
  }
#endif
  const at::Tensor bias_correction1 = 1 - torch::pow(options_.beta1, step_);
  const at::Tensor bias_correction2_sqrt = torch::sqrt(1 - torch::pow(options_.beta2, step_));
  const at::Tensor step_size = lr_ / bias_correction1;
  const at::Tensor decay = 1 - lr_ * options_.weight_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor& p = params_[i];
    const at::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    p.mul_(decay);
    exp_avg_[i].mul_(options_.beta1).add_(grad, 1 - options_.beta1);
    exp_avg_sq_[i].mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
    const at::Tensor denom = (exp_avg_sq_[i].sqrt() / bias_correction2_sqrt).add_(options_.eps);
    p.sub_(exp_avg_[i] / denom * step_size);
  }
}

int64_t AdamW::step_count() const { return static_cast<int64_t>(step_.item<float>()); }

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return torch::zeros({});
  // Multi-tensor kernels: a few launches for all gradients instead of two per gradient.
  const at::Tensor total = torch::stack(at::_foreach_norm(grads, 2)).to(at::kFloat).norm(2);
  const at::Tensor coefficient = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
#if TORCH_VERSION_MAJOR >= 2
  at::_foreach_mul_(grads, coefficient.to(grads.front().scalar_type()));
#else
  for (at::Tensor& grad : grads) grad.mul_(coefficient.to(grad.scalar_type()));
#endif
  return total;
}

namespace {

// Checkpoint keys are indices: archive keys may not contain the dots of parameter names. The names
// are stored too and compared on load.
std::string joined_names(const torch::OrderedDict<std::string, at::Tensor>& items) {
  std::string names;
  for (const auto& item : items) names += item.key() + "\n";
  return names;
}

std::string read_string(torch::serialize::InputArchive& archive, const std::string& key,
                        const std::string& path) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isString()) {
    throw Error("checkpoint " + path + " has no \"" + key +
                "\": it was not written by TrainStep; pass a step_<N>.pt file or its directory");
  }
  return value.toStringRef();
}

at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& key,
                       const std::string& path) {
  at::Tensor tensor;
  if (!archive.try_read(key, tensor)) {
    throw Error("checkpoint " + path + " has no tensor \"" + key + "\"; it is incomplete");
  }
  return tensor;
}

void copy_into(at::Tensor& target, const at::Tensor& loaded, const std::string& what,
               const std::string& path) {
  if (target.sizes() != loaded.sizes()) {
    std::ostringstream message;
    message << "checkpoint " << path << ": " << what << " has shape " << loaded.sizes()
            << ", the model has " << target.sizes();
    throw Error(message.str());
  }
  torch::NoGradGuard no_grad;
  target.copy_(loaded);
}

}  // namespace

std::string save_checkpoint(const std::string& dir, const models::WorldActionModel& model,
                            const AdamW& optimizer, const TrainProgress& progress) {
  fs::create_directories(dir);
  torch::serialize::OutputArchive archive;
  archive.write("model_config", c10::IValue(model->config().to_json().dump()));
  const auto parameters = model->named_parameters();
  const auto buffers = model->named_buffers();
  archive.write("parameter_names", c10::IValue(joined_names(parameters)));
  archive.write("buffer_names", c10::IValue(joined_names(buffers)));
  for (size_t i = 0; i < parameters.size(); ++i) {
    archive.write("parameter_" + std::to_string(i), parameters[i].value().detach().cpu());
    archive.write("exp_avg_" + std::to_string(i), optimizer.exp_avg()[i].cpu());
    archive.write("exp_avg_sq_" + std::to_string(i), optimizer.exp_avg_sq()[i].cpu());
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    archive.write("buffer_" + std::to_string(i), buffers[i].value().cpu(), /*is_buffer=*/true);
  }
  archive.write("optimizer_step", optimizer.step_tensor().cpu());
  archive.write("step", torch::tensor(progress.step, at::kLong));
  archive.write("noise_rng_state", progress.noise_rng_state.cpu());

  const std::string name = "step_" + std::to_string(progress.step) + ".pt";
  const std::string path = (fs::path(dir) / name).string();
  const std::string tmp = path + ".tmp";
  archive.save_to(tmp);
  fs::rename(tmp, path);
  write_file_atomically((fs::path(dir) / "latest").string(), name + "\n");
  return path;
}

TrainProgress load_checkpoint(const std::string& path, models::WorldActionModel& model,
                              AdamW& optimizer) {
  std::string file = path;
  if (fs::is_directory(path)) {
    const fs::path pointer = fs::path(path) / "latest";
    std::ifstream in(pointer);
    std::string name;
    if (!(in >> name)) {
      throw Error("resume: " + pointer.string() +
                  " is missing or empty; pass a step_<N>.pt file instead of the directory");
    }
    file = (fs::path(path) / name).string();
  }
  if (!fs::is_regular_file(file)) {
    throw Error("resume: checkpoint " + file + " does not exist");
  }
  torch::serialize::InputArchive archive;
  archive.load_from(file, at::Device(at::kCPU));

  const std::string saved_config = read_string(archive, "model_config", file);
  const std::string config = model->config().to_json().dump();
  if (saved_config != config) {
    throw Error("resume: checkpoint " + file + " was written for model config " + saved_config +
                ", this run's is " + config + "; resume with the same model preset");
  }
  auto parameters = model->named_parameters();
  auto buffers = model->named_buffers();
  if (read_string(archive, "parameter_names", file) != joined_names(parameters) ||
      read_string(archive, "buffer_names", file) != joined_names(buffers)) {
    throw Error("resume: checkpoint " + file +
                " names other parameters than this model; resume with the same model code");
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    const std::string index = std::to_string(i);
    const std::string& name = parameters[i].key();
    copy_into(parameters[i].value(), read_tensor(archive, "parameter_" + index, file), name, file);
    at::Tensor exp_avg = optimizer.exp_avg()[i];
    at::Tensor exp_avg_sq = optimizer.exp_avg_sq()[i];
    copy_into(exp_avg, read_tensor(archive, "exp_avg_" + index, file), name + " exp_avg", file);
    copy_into(exp_avg_sq, read_tensor(archive, "exp_avg_sq_" + index, file),
              name + " exp_avg_sq", file);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    copy_into(buffers[i].value(), read_tensor(archive, "buffer_" + std::to_string(i), file),
              buffers[i].key(), file);
  }
  at::Tensor optimizer_step = optimizer.step_tensor();
  copy_into(optimizer_step, read_tensor(archive, "optimizer_step", file), "optimizer step", file);

  TrainProgress progress;
  progress.step = read_tensor(archive, "step", file).item<int64_t>();
  progress.noise_rng_state = read_tensor(archive, "noise_rng_state", file);
  return progress;
}

std::string config_hash(const models::MoTConfig& config) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : config.to_json().dump()) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string tunableop_results_path(const std::string& gpu_name, const models::MoTConfig& config) {
  std::string gpu;
  for (char c : gpu_name) gpu += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  const std::string root = environment_value("WAM_COMPILE_CACHE").value_or("wam_compile_cache");
  return (fs::path(root) / "tunableop" /
          (gpu + "_torch" + TORCH_VERSION + "_" + config_hash(config) + ".csv"))
      .string();
}

void pad_vlm_context(models::TrainBatch& batch, int64_t pad_to) {
  const int64_t length = batch.vlm_context.size(1);
  if (length > pad_to) {
    throw Error("VLM context length " + std::to_string(length) +
                " exceeds vlm_context_pad_to=" + std::to_string(pad_to) +
                ": increase it; the context will not be truncated.");
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

std::vector<double> to_doubles(const models::LossTerms& loss) {
  return {loss.total.item<double>(), loss.video.item<double>(), loss.action.item<double>(),
          loss.future_delta.item<double>(), loss.semantic.item<double>()};
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
struct StepRunner::Graph {
  at::cuda::CUDAGraph graph;
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

std::vector<double> StepRunner::step(const models::TrainBatch& batch, double lr,
                                     at::Generator& noise_gen) {
  optimizer_.set_lr(lr);
#if WAM_WITH_CUDA
  if (compiled_) return graph_step(batch, noise_gen);
#endif
  return eager_step(batch, noise_gen);
}

models::LossTerms StepRunner::forward_backward_update(const models::TrainBatch& batch,
                                                      const models::FlowNoise& noise) {
  models::LossTerms loss;
  {
#if WAM_WITH_CUDA
    CudaAutocast autocast(options_.autocast_bf16 && device_.is_cuda(), /*cache=*/!compiled_);
#endif
    loss = model_->loss(batch, noise);
  }
  loss.total.backward();
  clip_grad_norm(optimizer_.params(), options_.max_grad_norm);
  optimizer_.step();
  return loss;
}

std::vector<double> StepRunner::eager_step(const models::TrainBatch& batch,
                                           at::Generator& noise_gen) {
  reset_grads(optimizer_.params());
  const models::FlowNoise noise = models::sample_flow_noise(batch, model_->config(), noise_gen);
  const models::LossTerms loss = forward_backward_update(batch, noise);
  return to_doubles(loss);
}

#if WAM_WITH_CUDA
namespace {

constexpr int kWarmupIterations = 3;

std::vector<at::Tensor*> batch_fields(models::TrainBatch& b) {
  return {&b.video_latents, &b.anchor_latents, &b.recent_latents, &b.recent_is_pad,
          &b.context,       &b.context_mask,   &b.vlm_context,    &b.vlm_mask,
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

// Warm-up on a side stream (tunes GEMMs through TunableOp, initialises cuBLAS workspaces and the
// autograd engine) with forward and backward only, so the training state is untouched; then the
// whole step, optimizer included, is captured once. Noise for the warm-up comes from its own
// generator: the training noise sequence is the same as eager's.
void StepRunner::capture(const models::TrainBatch& batch) {
  graph_ = std::make_unique<Graph>();
  auto inputs = batch_fields(graph_->inputs);
  auto sources = batch_fields(const_cast<models::TrainBatch&>(batch));
  for (size_t i = 0; i < inputs.size(); ++i) *inputs[i] = sources[i]->clone();
  at::Generator warmup_gen = make_noise_generator(device_, 0);
  graph_->noise = models::sample_flow_noise(graph_->inputs, model_->config(), warmup_gen);

  c10::cuda::CUDAStream side = at::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                                           device_.index());
  c10::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream(device_.index());
  at::cuda::CUDAEvent ready;
  ready.record(main);
  ready.block(side);
  {
    c10::cuda::CUDAStreamGuard guard(side);
    for (int i = 0; i < kWarmupIterations; ++i) {
      reset_grads(optimizer_.params());
      models::LossTerms loss;
      {
        CudaAutocast autocast(options_.autocast_bf16, /*cache=*/false);
        loss = model_->loss(graph_->inputs, graph_->noise);
      }
      loss.total.backward();
      clip_grad_norm(optimizer_.params(), options_.max_grad_norm);
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
    c10::cuda::CUDAStreamGuard guard(side);
    graph_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    graph_->outputs = forward_backward_update(graph_->inputs, graph_->noise);
    graph_->graph.capture_end();
  }
  at::cuda::CUDAEvent captured;
  captured.record(side);
  captured.block(main);
}

std::vector<double> StepRunner::graph_step(const models::TrainBatch& batch,
                                           at::Generator& noise_gen) {
  if (!graph_) capture(batch);
  copy_batch(graph_->inputs, batch);
  copy_noise(graph_->noise, models::sample_flow_noise(graph_->inputs, model_->config(), noise_gen));
  graph_->graph.replay();
  return to_doubles(graph_->outputs);
}
#endif

void SpeedMeter::record(int64_t step, double seconds) {
  history_.emplace_back(step, seconds);
  while (history_.size() > 11) history_.pop_front();
}

double SpeedMeter::steps_per_second() const {
  if (history_.size() < 2) return 0;
  const double elapsed = history_.back().second - history_.front().second;
  if (elapsed <= 0) return 0;
  return static_cast<double>(history_.back().first - history_.front().first) / elapsed;
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--:--";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  char text[32];
  std::snprintf(text, sizeof(text), "%02lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return text;
}

}  // namespace wam::train
