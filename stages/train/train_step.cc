// TrainStep: the training sink. Trains the MoT world-action model one optimizer step per batch
// (AdamW, linear warmup then cosine, grad clipping, bf16 autocast on CUDA) and emits one record per
// step. `mode: eager` runs the step op by op with per-layer activation checkpointing (the
// reference's baseline); `mode: compiled` captures the whole step (forward, backward, optimizer)
// once as a CUDA graph over static input buffers and replays it, with GEMMs tuned by TunableOp
// (results under $WAM_COMPILE_CACHE/tunableop). Without CUDA, compiled runs eager and says why
// once.
//
// The model preset is the `model` param's object, normally a $ref into an included
// configs/model/*.json fragment, so `--set include.model=configs/model/tiny.json` swaps it.
//
// Training-state files (train/training_state.h: checkpoint_dir/step_<N>.safetensors, written
// through wam::AtomicFile; checkpoint_dir/latest names the newest) hold the model, the optimizer
// state, the step count (the schedule's position) and the noise generator's state; `resume`
// continues the exact loss curve when fed the same batches. The source's position is not reachable
// from a stage: resume the source separately.
//
// Under a launcher (common/distributed.h: WORLD_SIZE > 1, or 1 with MASTER_ADDR) the step is
// data-parallel, as DDP: rank 0's initial (or resumed) weights are broadcast, gradients are
// averaged across ranks in buckets of `bucket_mb` while backward runs (train/data_parallel.h), each
// rank draws its own noise (seed mixed with the rank), the emitted losses are the ranks' mean and
// samples/s counts every rank's batch. Only rank 0 logs [train] lines and writes training-state
// files; a file resumes on any number of ranks (rank 0 continues the saved noise stream, other
// ranks start theirs from seed, rank and step). The compiled data-parallel step captures its
// all-reduces in the CUDA graph (NCCL), or with `collectives: outside_graph` runs them between two
// graphs.
//
// On CUDA each step's device time (CUDA events around it) goes on the run trace's "device" track
// under this node (`run --trace-out`).
//
// Reads:  video_latents, memory_video_anchor_latents, memory_video_recent_latents,
//         memory_video_recent_is_pad, context, context_mask, vlm_context, vlm_mask, action,
//         action_is_pad, action_dim_is_pad, proprio (Tensor); epoch (when present, for the log).
// Writes: step (Int), loss, loss_video, loss_action, loss_future_delta, loss_semantic, lr
//         (Double); a record replaces the batch. Reports: the scalar "loss" per step.
// Example: {"id": "step", "type": "TrainStep", "inputs": ["h2d"],
//           "params": {"model": {"$ref": "model"}, "mode": "compiled", "log_every": 10}}
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <variant>

#include "common/device.h"
#include "common/distributed.h"
#include "common/seeding.h"
#include "models/fp8_linear.h"
#include "models/fused_norm.h"
#include "models/weights_file.h"
#include "models/world_model.h"
#include "train/data_parallel.h"
#include "train/optimizer.h"
#include "train/speed_meter.h"
#include "train/step_runner.h"
#include "train/training_state.h"
#include "train/training_step.h"
#include "train/tunableop.h"
#include "wam/limits.h"
#include "wam/registry.h"
#include "wam/tensor.h"

#if WAM_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace wam::train {
// Found by argument-dependent lookup from the params' parser.
constexpr auto enum_names(CollectivePlacement) {
  return std::array{EnumName{CollectivePlacement::kInGraph, "in_graph"},
                    EnumName{CollectivePlacement::kOutsideGraph, "outside_graph"}};
}
}  // namespace wam::train

namespace wam::stages {
namespace {

enum class StepMode { kEager, kCompiled };
constexpr auto enum_names(StepMode) {
  return std::array{EnumName{StepMode::kEager, "eager"}, EnumName{StepMode::kCompiled, "compiled"}};
}

// The MoT linear layers' products in the compiled step (models/fp8_linear.h).
enum class ProductPrecision { kBf16, kFp8 };
constexpr auto enum_names(ProductPrecision) {
  return std::array{EnumName{ProductPrecision::kBf16, "bf16"},
                    EnumName{ProductPrecision::kFp8, "fp8"}};
}

struct TrainStepParams {
  models::MoTConfig model;
  StepMode mode = StepMode::kEager;
  int64_t activation_checkpoint_group = -1;
  double learning_rate = 1e-4;
  double weight_decay = 0.01;
  double warmup_ratio = 0.05;
  double min_lr_ratio = 0.01;
  double max_grad_norm = 1.0;
  int64_t total_steps = 0;
  int64_t log_every = 10;
  std::string training_state_dir;
  int64_t save_every = 0;
  std::string resume;
  std::string weights;
  std::string weights_prefix;
  bool autocast_bf16 = true;
  ProductPrecision precision = ProductPrecision::kBf16;
  int64_t seed = -1;
  int64_t vlm_context_pad_to = 1024;
  double memory_budget = 0;
  double bucket_mb = 25;
  train::CollectivePlacement collectives = train::CollectivePlacement::kInGraph;
  bool cuda_graph = true;

  template <class V>
  void visit(V& v) {
    v("model", model,
      "Model preset object (a configs/model/*.json fragment, usually {\"$ref\": \"model\"}).",
      NonEmpty{});
    v("mode", mode,
      "eager: op by op; compiled: the whole step replayed as one CUDA graph, q/k norms and RoPE "
      "as fused kernels.");
    v("checkpoint_group", activation_checkpoint_group,
      "Activation checkpointing: recompute groups of this many layers (0: off; -1: 1 for eager, "
      "3 for compiled).",
      Min{-1});
    v("learning_rate", learning_rate, "Peak learning rate.", Min{0.0});
    v("weight_decay", weight_decay, "AdamW decoupled weight decay.", Min{0.0});
    v("warmup_ratio", warmup_ratio, "Fraction of total_steps with linear warmup.", Min{0.0},
      Max{1.0});
    v("min_lr_ratio", min_lr_ratio, "Cosine floor as a fraction of learning_rate.", Min{0.0},
      Max{1.0});
    v("max_grad_norm", max_grad_norm, "Clip the global gradient L2 norm to this.", Min{0.0});
    v("total_steps", total_steps, "Schedule length (0: settings.steps).", Min{0});
    v("log_every", log_every, "Log a [train] line every N steps, and the last step's.", Min{1});
    v("checkpoint_dir", training_state_dir,
      "Where step_<N>.safetensors and `latest` go (\"\": none).");
    v("save_every", save_every,
      "Save the training state every N steps (0: only at the end of the run).", Min{0});
    v("resume", resume, "Training-state file or directory to continue from (\"\": start fresh).");
    v("weights", weights,
      "A safetensors file whose tensors replace the seeded initial weights by parameter name "
      "(\"\": the seeded ones); the optimizer and schedule start fresh. Every parameter the file "
      "lacks, tensor the model has none of and shape that differs is named in one error.");
    v("weights_prefix", weights_prefix,
      "The prefix of the model's tensors in `weights` (\"model.\" for a training-state file "
      "step_<N>.safetensors).");
    v("autocast_bf16", autocast_bf16, "bf16 autocast for the forward pass (CUDA only).");
    v("precision", precision,
      "compiled: the MoT linear layers' matrix products. bf16; or fp8 (Hopper): inputs and "
      "weights in E4M3, output gradients in E5M2, each scaled per tensor by its amax over the "
      "last 15 steps; weight gradients, weights and the optimizer stay bf16/float32.");
    v("seed", seed, "Seeds model init and the noise generator (-1: settings.seed).", Min{-1});
    v("vlm_context_pad_to", vlm_context_pad_to,
      "compiled: VLM context tokens padded to this for a stable graph; longer is an error.",
      Min{1});
    v("memory_budget", memory_budget,
      "compiled, with checkpointing: share of the device's memory the step may take; groups "
      "that fit keep their activations instead of being recomputed (0: recompute all and keep "
      "only the vectors' bfloat16 copies, not the matrices').",
      Min{0.0}, Max{1.0});
    v("bucket_mb", bucket_mb,
      "Data-parallel runs: gradients are all-reduced in buckets of this many MiB, overlapped "
      "with backward (DDP's bucket_cap_mb).",
      Min{0.0});
    v("collectives", collectives,
      "Compiled data-parallel step: in_graph captures the all-reduces in the CUDA graph, "
      "overlapped with backward; outside_graph runs them between a forward+backward graph and "
      "an update graph.");
    v("cuda_graph", cuda_graph,
      "compiled: capture the step once as a CUDA graph and replay it (false: the same kernels "
      "launched op by op, slower; a profile then names the op behind each kernel).");
  }

  void check(ParamChecker& c) const {
    c.require(weights.empty() || resume.empty(), "weights",
              "a resumed training state brings its own weights: set `weights` or `resume`, not "
              "both");
    if (!weights.empty() && resume.empty()) {
      if (const std::string problem = regular_file_problem(weights); !problem.empty()) {
        c.error("weights", "weights file " + weights + ": " + problem);
      }
    }
    if (precision != ProductPrecision::kFp8) return;
    c.require(mode == StepMode::kCompiled, "precision",
              "\"fp8\" is the compiled step's: set mode to \"compiled\", or precision to "
              "\"bf16\"");
    if (mode != StepMode::kCompiled) return;
    c.require(autocast_bf16, "precision",
              "\"fp8\" casts the bf16 activations of autocast: set autocast_bf16 to true");
    c.require(models::fp8_linears_built(), "precision",
              "\"fp8\" needs the fused CUDA kernels (stages/kernels, built where LibTorch has "
              "CUDA and nvcc is found), and this build has none: set precision to \"bf16\"");
  }
};

constexpr const char* kReads[] = {"video_latents",
                                  "memory_video_anchor_latents",
                                  "memory_video_recent_latents",
                                  "memory_video_recent_is_pad",
                                  "context",
                                  "context_mask",
                                  "vlm_context",
                                  "vlm_mask",
                                  "action",
                                  "action_is_pad",
                                  "action_dim_is_pad",
                                  "proprio"};

class TrainStepStage final : public Stage, public TrainingStep {
 public:
  static constexpr std::string_view kType = "TrainStep";
  static constexpr std::string_view kSummary =
      "Trains the world-action model one step per batch (eager or CUDA-graph compiled); emits "
      "one record per step.";
  using Params = TrainStepParams;

  bool compiled() const override { return params_.mode == StepMode::kCompiled; }
  void disable_training_state() override {
    params_.training_state_dir.clear();
    params_.save_every = 0;
    params_.resume.clear();
  }

  explicit TrainStepStage(Params params) : params_(std::move(params)) {}

  void declare(Contract& contract) const override {
    for (const char* name : kReads) {
      contract.reads(name, FieldType::kTensor);
      contract.removes(name);
    }
    contract.writes("step", FieldType::kInt);
    for (const char* name :
         {"loss", "loss_video", "loss_action", "loss_future_delta", "loss_semantic", "lr"}) {
      contract.writes(name, FieldType::kDouble);
    }
    contract.order_sensitive();
    contract.concurrency(Concurrency::serial());
  }

  void open(Context& context) override {
    context_ = &context;
    device_ = resolve_device("auto", context.settings(), "TrainStep");
    config_ = params_.model;
    const bool compiled = params_.mode == StepMode::kCompiled;
    config_.activation_checkpoint_group = params_.activation_checkpoint_group >= 0
                                              ? params_.activation_checkpoint_group
                                              : (compiled ? 3 : 1);
    const int64_t total = params_.total_steps > 0 ? params_.total_steps : context.settings().steps;
    if (total <= 0) {
      throw Error(
          "TrainStep: the learning-rate schedule needs the run length: set params.total_steps or "
          "settings.steps (both are 0)");
    }
    schedule_ = {params_.learning_rate, params_.warmup_ratio, params_.min_lr_ratio, total};
    const uint64_t seed =
        static_cast<uint64_t>(params_.seed >= 0 ? params_.seed : context.settings().seed);
    world_ = &dist::World::get();
    // Rank 0 draws the noise of a single-process run; the others streams of their own.
    const uint64_t noise_seed =
        world_->rank() == 0 ? seed : seeding::mix_seed(seed, static_cast<uint64_t>(world_->rank()));

    torch::manual_seed(seed);  // model initialisation
    model_ = models::WorldActionModel(config_);
    model_->to(device_);
    if (!params_.weights.empty()) {
      models::load_module_weights(*model_, params_.weights, params_.weights_prefix);
    }
    model_->train();
    optimizer_ = std::make_unique<train::AdamW>(
        model_->parameters(), train::AdamWOptions{0.9, 0.95, 1e-8, params_.weight_decay});
    noise_gen_ = train::make_noise_generator(device_, noise_seed);

    if (!params_.resume.empty()) resume_training_state(noise_seed);
    if (world_->distributed()) {
      std::vector<at::Tensor> state;
      for (const at::Tensor& p : model_->parameters()) state.push_back(p.detach());
      for (const at::Tensor& b : model_->buffers()) state.push_back(b);
      world_->broadcast(state, 0, "broadcast of the initial weights from rank 0");
    }
    // After the resume and the broadcast, which write the weights in ways a copy cannot see. The
    // FP8 products cast from the float32 weights themselves. The bfloat16 copies trade 2 bytes a
    // weight for the casts of every forward (docs/KERNELS.md, version 9); where the run asked for
    // the least memory (every group recomputed), only the vectors' copies: 2 MB in the base
    // preset, which save half the casts' launches (version 11).
    if (compiled && device_.is_cuda()) {
      using Copies = train::AdamW::Bf16Copies;
      const bool least_memory =
          config_.activation_checkpoint_group > 0 && params_.memory_budget == 0;
      optimizer_->use_own_kernel(params_.precision != ProductPrecision::kBf16 ? Copies::kNone
                                 : least_memory                               ? Copies::kVectors
                                                                              : Copies::kAll);
    }

    std::string tunableop_results;
    const bool compiled_on_cuda = compiled && compiled_step_on_cuda(context, tunableop_results);
    runner_ = std::make_unique<train::StepRunner>(
        model_, *optimizer_, device_,
        train::StepOptions{params_.max_grad_norm, params_.autocast_bf16, params_.memory_budget,
                           params_.collectives, params_.precision == ProductPrecision::kFp8,
                           params_.cuda_graph},
        compiled_on_cuda, tunableop_results);
    if (world_->distributed()) {
      averager_ = std::make_unique<train::GradientAverager>(
          model_->named_parameters().pairs(), *world_,
          std::max<int64_t>(1, static_cast<int64_t>(params_.bucket_mb * (1 << 20))));
      runner_->set_gradient_sync(averager_.get());
    }

    log_opened(compiled_on_cuda);
    saved_step_ = step_;
    last_logged_step_ = step_;  // a resumed run logs only the steps it does
    start_ = std::chrono::steady_clock::now();
  }

  void process(Sample sample, Emitter& out) override {
    models::TrainBatch batch = read_batch(sample);
    if (params_.mode == StepMode::kCompiled) {
      train::pad_vlm_context(batch, params_.vlm_context_pad_to);
    }

    const int64_t step = step_ + 1;
    const double lr = schedule_.at(step);
    if (step > 1) dist::test_exit_point("train_step");
    const Clock::time_point issued = Clock::now();
    train::Losses loss = runner_->step(batch, lr, noise_gen_);
    if (const std::optional<double> device_ms = runner_->last_device_ms()) {
      // Placed at the step's issue time: the previous step's loss read left the device idle.
      context_->trace_span("device", "step " + std::to_string(step), issued,
                           std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double, std::milli>(*device_ms)));
    }
    int64_t rows = batch.action.size(0);
    if (world_->distributed()) reduce_for_log(loss, rows);
    step_ = step;
    speed_.record(step_, seconds_since_open());
    if (!recompute_logged_ && !runner_->recompute_note().empty()) {
      context_->log("TrainStep: " + runner_->recompute_note());
      recompute_logged_ = true;
    }

    last_ = {epoch_of(sample), rows, loss, lr};
    if (step_ % params_.log_every == 0 && world_->rank() == 0) log_progress();
    if (!params_.training_state_dir.empty() && params_.save_every > 0 &&
        step_ % params_.save_every == 0) {
      save();
    }

    Sample record("step:" + std::to_string(step_));
    record.set_seq(sample.seq());
    record.set("step", step_);
    record.set("loss", loss.total);
    record.set("loss_video", loss.video);
    record.set("loss_action", loss.action);
    record.set("loss_future_delta", loss.future_delta);
    record.set("loss_semantic", loss.semantic);
    record.set("lr", lr);
    context_->report_scalar("loss", loss.total);
    out.emit(std::move(record));
  }

  void close(Emitter&) override {
    // The last step is logged whatever log_every is: a short run shows its loss.
    if (step_ > 0 && step_ != last_logged_step_ && world_->rank() == 0) log_progress();
    if (!params_.training_state_dir.empty() && step_ != saved_step_ && runner_) save();
  }

 private:
  // Continues the training state in params_.resume: model, optimizer and step count; rank 0 also
  // continues the saved noise stream, each other rank starts its own from its seed and the step.
  void resume_training_state(uint64_t noise_seed) {
    const train::TrainProgress progress =
        train::load_training_state(params_.resume, model_, *optimizer_);
    step_ = progress.step;
    if (world_->rank() == 0) {
      std::lock_guard<std::mutex> lock(noise_gen_.mutex());
      noise_gen_.set_state(progress.noise_rng_state);
    } else {
      noise_gen_ = train::make_noise_generator(
          device_, seeding::mix_seed(noise_seed, static_cast<uint64_t>(step_)));
    }
  }

  // Whether the compiled step runs as compiled here (CUDA code paths and a CUDA device), saying
  // how in the log; `tunableop_results` gets the TunableOp GEMM results file it then uses.
  bool compiled_step_on_cuda(Context& context, std::string& tunableop_results) const {
    bool compiled_on_cuda = false;
#if WAM_WITH_CUDA
    compiled_on_cuda = device_.is_cuda();
#endif
    if (compiled_on_cuda) {
#if WAM_WITH_CUDA
      // Keyed by the preset as given: activation checkpointing does not change the GEMM shapes,
      // and `wam-pipeline compile` finds the file from the preset alone.
      tunableop_results = train::tunableop_results_path(
          at::cuda::getDeviceProperties(device_.index())->name, params_.model);
      context.log(std::string("TrainStep: compiled step: ") +
                  (params_.cuda_graph ? "captured once as a CUDA graph after warm-up"
                                      : "its kernels launched op by op (cuda_graph false)") +
                  "; q/k norms " +
                  (models::fused_kernels_built()
                       ? "fused (stages/kernels)"
                       : "unfused (built without stages/kernels: no CUDA compiler, or "
                         "WAM_BUILD_FUSED_KERNELS=OFF)") +
                  "; TunableOp GEMM results in " + tunableop_results);
#endif
    } else {
      context.log(std::string("TrainStep: mode \"compiled\" needs CUDA graphs and a CUDA "
                              "device; ") +
                  (device_.is_cuda() ? "this build has no CUDA code paths (WAM_WITH_CUDA off)"
                                     : "the training device is cpu") +
                  ", so the step runs eager.");
    }
    return compiled_on_cuda;
  }

  // The line open() logs: what is trained, where, how, and for how long.
  void log_opened(bool compiled_on_cuda) const {
    context_->log(
        "TrainStep: " + std::to_string(model_->parameter_count()) + " parameters on " +
        device_.str() + ", mode " +
        (compiled() && !compiled_on_cuda ? std::string("eager (\"compiled\" without CUDA graphs)")
                                         : std::string(enum_name(params_.mode))) +
        ", checkpoint_group " + std::to_string(config_.activation_checkpoint_group) +
        (compiled_on_cuda ? ", products " + std::string(enum_name(params_.precision))
                          : std::string()) +
        ", " + std::to_string(schedule_.total_steps) + " steps" +
        (params_.resume.empty() ? std::string() : ", resumed at step " + std::to_string(step_)) +
        (params_.weights.empty() ? std::string() : ", weights from " + params_.weights) +
        (world_->distributed()
             ? ", data-parallel " + world_->describe() + " (" +
                   std::to_string(averager_->bucket_count()) + " gradient buckets)"
             : std::string()));
  }

  models::TrainBatch read_batch(const Sample& sample) const {
    auto field = [&](const char* name) { return sample.tensor(name).to(device_); };
    models::TrainBatch batch;
    batch.video_latents = field("video_latents");
    batch.anchor_latents = field("memory_video_anchor_latents");
    batch.recent_latents = field("memory_video_recent_latents");
    batch.recent_is_pad = field("memory_video_recent_is_pad");
    batch.context = field("context");
    batch.context_mask = field("context_mask");
    batch.vlm_context = field("vlm_context");
    batch.vlm_mask = field("vlm_mask");
    batch.action = field("action");
    batch.action_is_pad = field("action_is_pad");
    batch.action_dim_is_pad = field("action_dim_is_pad");
    batch.proprio = field("proprio");
    return batch;
  }

  // The ranks' mean losses and their total batch rows.
  void reduce_for_log(train::Losses& loss, int64_t& rows) {
    at::Tensor values = torch::tensor({loss.total, loss.video, loss.action, loss.future_delta,
                                       loss.semantic, static_cast<double>(rows)},
                                      at::kDouble);
    world_->all_reduce_sum({values}, "all_reduce of the step's losses for the log");
    const double n = static_cast<double>(world_->size());
    const double* v = values.data_ptr<double>();
    loss.total = v[0] / n;
    loss.video = v[1] / n;
    loss.action = v[2] / n;
    loss.future_delta = v[3] / n;
    loss.semantic = v[4] / n;
    rows = static_cast<int64_t>(v[5]);
  }

  double seconds_since_open() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  // Kept as the sample holds it: a tensor is read only when a line is logged.
  static std::variant<int64_t, at::Tensor> epoch_of(const Sample& sample) {
    if (!sample.has("epoch")) return int64_t{0};
    if (sample.type("epoch") == FieldType::kTensor) return sample.tensor("epoch");
    return sample.get_int("epoch");
  }

  // A [train] line for the step just done (last_).
  void log_progress() {
    const auto& [epoch_field, batch_size, loss, lr] = last_;
    const int64_t epoch = std::holds_alternative<int64_t>(epoch_field)
                              ? std::get<int64_t>(epoch_field)
                              : std::get<at::Tensor>(epoch_field).reshape({-1})[0].item<int64_t>();
    last_logged_step_ = step_;
    const double steps_per_second = speed_.steps_per_second();
    const double eta = steps_per_second > 0
                           ? static_cast<double>(schedule_.total_steps - step_) / steps_per_second
                           : -1;
    char line[512];
    std::snprintf(line, sizeof(line),
                  "[train] epoch=%lld step=%lld/%lld loss=%.4f video=%.4f action=%.4f "
                  "future_delta=%.4f semantic=%.4f lr=%.2e speed=%.2f optimizer_step/s, %.2f "
                  "samples/s eta=%s",
                  static_cast<long long>(epoch), static_cast<long long>(step_),
                  static_cast<long long>(schedule_.total_steps), loss.total, loss.video,
                  loss.action, loss.future_delta, loss.semantic, lr, steps_per_second,
                  steps_per_second * static_cast<double>(batch_size),
                  train::format_eta(eta).c_str());
    context_->log(line);
  }

  void save() {
    if (world_->rank() != 0) {  // every rank holds the same weights; rank 0 writes them
      saved_step_ = step_;
      return;
    }
    train::TrainProgress progress;
    progress.step = step_;
    {
      std::lock_guard<std::mutex> lock(noise_gen_.mutex());
      progress.noise_rng_state = noise_gen_.get_state();
    }
    const std::string path =
        train::save_training_state(params_.training_state_dir, model_, *optimizer_, progress);
    saved_step_ = step_;
    context_->log("TrainStep: saved " + path);
  }

  Params params_;
  Context* context_ = nullptr;
  at::Device device_ = at::Device(at::kCPU);
  models::MoTConfig config_;
  train::LrSchedule schedule_;
  models::WorldActionModel model_{nullptr};
  std::unique_ptr<train::AdamW> optimizer_;
  at::Generator noise_gen_;
  std::unique_ptr<train::StepRunner> runner_;
  dist::World* world_ = nullptr;
  std::unique_ptr<train::GradientAverager> averager_;
  train::SpeedMeter speed_;
  std::chrono::steady_clock::time_point start_;
  int64_t step_ = 0;
  int64_t saved_step_ = 0;
  // What the [train] line of the step just done shows, and the last step logged.
  struct LoggedStep {
    std::variant<int64_t, at::Tensor> epoch = int64_t{0};
    int64_t rows = 0;
    train::Losses loss;
    double lr = 0;
  };
  LoggedStep last_;
  int64_t last_logged_step_ = 0;
  bool recompute_logged_ = false;
};

WAM_REGISTER_STAGE(TrainStepStage);

}  // namespace
}  // namespace wam::stages
