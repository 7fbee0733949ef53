// HostToDevice: moves every CPU tensor field of a batch to the training device; fields already in
// GPU memory (Augment's outputs from device frames) pass through, uint8 `video` normalised there.
//
// mode pageable: blocking .to(device) per field (the baseline).
// mode pinned: a pool of `pool_batches` staging buffers (pinned host memory + device memory;
//   device/staging_pool.h), sized from the first batch and grown (with a log line) when a batch
//   does not fit. A batch is packed into the pinned buffer, copied with non_blocking copies on a
//   dedicated CUDA stream and emitted as views of the buffer's device memory. The pool is the
//   flow-control token: a buffer returns to the pool only when the last view of it is dropped
//   downstream (the step consumed the batch); when every buffer is held, process() waits.
//
// Synchronisation, the one thing a consumer must know: the copy stream's completion event is
// waited for on this stage's thread before the batch is emitted, so a consumer never sees data in
// flight and needs no stream wait. The copy still overlaps the step, whose kernels run on its own
// stream meanwhile. When the last view of a buffer is dropped, an event is recorded on the
// dropping thread's current stream (the stream that used the batch) and the next copy into that
// buffer waits for it on the copy stream, so a buffer is never overwritten under a running kernel.
//
// `video` as uint8 levels (Augment's video_dtype: uint8) crosses as those bytes (a quarter of
// float's) and is normalised to float [-1, 1] on the GPU. video_as_uint8 does the same for float
// `video` by quantising it here first, per batch on this stage's one thread, which made the pinned
// stage the slowest transfer on the GPU host (docs/BENCHMARKS.md); Augment's video_dtype quantises
// per sample, in parallel.
// Without CUDA, batches pass through unchanged (logged once), except that uint8 `video` is
// normalised to float on the host: the stages after this one take float video.
//
// Counters: bytes_copied; in pinned mode also staging_us (host time packing batches into pinned
// buffers), copy_us (the copies and the normalisation on the device, timed with CUDA events on the
// copy stream, which only this stage uses, so waits for earlier GPU work are not in it),
// pool_waits and pool_wait_us (waits for a free buffer), device_wait_us (the stage's thread
// waiting for the device to finish with the buffer's previous batch before its copies could start:
// the copies' synchronisation less copy_us).
//
// Reads: every Tensor field (generic); with video_as_uint8, video (Tensor) must be among them.
// Writes: the same fields, on the device (`video` float).
// Example: {"id": "h2d", "type": "HostToDevice", "inputs": ["collate"],
//           "params": {"mode": "pinned", "pool_batches": 4, "video_as_uint8": true}}
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "common/device.h"
#include "data/image_ops.h"
#include "device/staging_pool.h"
#include "device/transfer_timing.h"
#include "wam/host_memory.h"
#include "wam/registry.h"
#include "wam/tensor.h"

#if WAM_WITH_CUDA
#include <chrono>
#include <memory>
#include <vector>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace wam::stages {
namespace {

enum class TransferMode { kPageable, kPinned };
constexpr auto enum_names(TransferMode) {
  return std::array{EnumName{TransferMode::kPageable, "pageable"},
                    EnumName{TransferMode::kPinned, "pinned"}};
}

struct HostToDeviceParams {
  TransferMode mode = TransferMode::kPageable;
  int64_t pool_batches = 4;
  bool video_as_uint8 = false;
  std::string device = "auto";

  template <class V>
  void visit(V& v) {
    v("mode", mode,
      "pageable: blocking copies; pinned: pinned pool, side-stream copies, buffers as tokens.");
    v("pool_batches", pool_batches, "pinned: staging buffers (batches in flight to the step).",
      Min{1});
    v("video_as_uint8", video_as_uint8,
      "Quantise float `video` to uint8 here and ship that (4x fewer bytes), normalised to [-1, 1] "
      "on the GPU. Slow on this one thread: prefer Augment's video_dtype uint8, whose uint8 "
      "`video` is shipped this way whatever this param says. On, `video` must reach this stage.");
    v("device", device, "Target device (auto: settings.device).", OneOf{"auto", "cuda", "cpu"});
  }
};

// Augment's video_dtype uint8: levels round((x + 1) * 127.5) of a video in [-1, 1].
bool is_video_levels(const std::string& name, const at::Tensor& t) {
  return name == "video" && t.scalar_type() == at::kByte;
}

// The float dtype `video` leaves this stage with.
at::ScalarType normalised_dtype(const at::Tensor& video) {
  return video.is_floating_point() ? video.scalar_type() : at::kFloat;
}

#if WAM_WITH_CUDA
bool is_float_video(const std::string& name, const at::Tensor& t) {
  return name == "video" && t.is_floating_point();
}

constexpr int64_t kAlignment = 256;

int64_t align(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Where one tensor field goes in a staging buffer.
struct FieldLayout {
  std::string name;
  at::Tensor source;      // the CPU tensor
  bool quantize = false;  // float video made levels here (video_as_uint8)
  bool levels = false;    // crosses as uint8 levels, normalised to float on the device
  at::ScalarType output_dtype = at::kFloat;
  int64_t host_offset = 0, host_bytes = 0;      // what crosses the bus
  int64_t device_offset = 0, device_bytes = 0;  // what is copied into
  int64_t output_offset = 0, output_bytes = 0;  // the emitted tensor (levels: float video)
};
#endif

// A time the run counts (a counter in its summary) and the stage's own total of it: `bench` reads
// the totals after the run, when the run's counters have gone with its contexts.
class TimeTotal {
 public:
  // At open(): the totals count from here.
  void count_in(Counter& counter) {
    counter_ = &counter;
    total_.store(0, std::memory_order_relaxed);
  }
  bool counting() const { return counter_ != nullptr; }
  void add(int64_t us) {
    counter_->add(us);
    total_.fetch_add(us, std::memory_order_relaxed);
  }
  int64_t total() const { return total_.load(std::memory_order_relaxed); }

 private:
  Counter* counter_ = nullptr;
  std::atomic<int64_t> total_{0};
};

class HostToDeviceStage final : public Stage, public TimedTransfer {
 public:
  static constexpr std::string_view kType = "HostToDevice";
  static constexpr std::string_view kSummary =
      "Moves every tensor field to the training device (pageable, or a pinned pool on a side "
      "stream whose buffers are the flow-control tokens).";
  using Params = HostToDeviceParams;

  explicit HostToDeviceStage(Params params) : params_(std::move(params)) {}

  // Every other tensor field crosses as it is; `video` is rewritten (uint8 levels become float),
  // which validation can only see when this stage is told to expect it.
  void declare(Contract& contract) const override {
    if (params_.video_as_uint8) {
      contract.reads("video", FieldType::kTensor);
      contract.writes("video", FieldType::kTensor);
    }
    contract.concurrency(Concurrency::serial());
  }

  TransferTiming transfer_timing() const override {
    TransferTiming timing;
    timing.pool_wait_us = pool_wait_us_.total();
    timing.staging_us = staging_us_.total();
    timing.copy_us = copy_us_.total();
    timing.device_wait_us = device_wait_us_.total();
    timing.event_timed = copy_us_.counting();
    return timing;
  }

  void open(Context& context) override {
    context_ = &context;
    device_ = resolve_device(params_.device, context.settings(), "HostToDevice");
    bytes_copied_ = &context.counter("bytes_copied");
    pool_waits_ = &context.counter("pool_waits");
    pool_wait_us_.count_in(context.counter("pool_wait_us"));
    if (!device_.is_cuda()) {
      context.log(
          "HostToDevice: the training device is cpu; batches pass through unchanged (uint8 "
          "video is normalised to float)");
      return;
    }
#if WAM_WITH_CUDA
    if (params_.mode == TransferMode::kPinned) {
      staging_us_.count_in(context.counter("staging_us"));
      copy_us_.count_in(context.counter("copy_us"));
      device_wait_us_.count_in(context.counter("device_wait_us"));
    }
    copy_stream_ = at::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index());
#endif
  }

  void process(Sample sample, Emitter& out) override {
    if (!device_.is_cuda()) {
      normalise_video_levels_on_host(sample);
      out.emit(std::move(sample));
      return;
    }
#if WAM_WITH_CUDA
    normalise_video_levels_on_device(sample);
    if (params_.mode == TransferMode::kPinned) {
      copy_pinned(sample);
    } else {
      copy_pageable(sample);
    }
#endif
    out.emit(std::move(sample));
  }

 private:
  // The same values as the device path's normalisation, so a CPU run trains on what a GPU run
  // would.
  static void normalise_video_levels_on_host(Sample& sample) {
    if (!sample.has("video") || sample.type("video") != FieldType::kTensor) return;
    const at::Tensor& levels = sample.tensor("video");
    if (!is_video_levels("video", levels)) return;
    at::Tensor video = levels.to(normalised_dtype(levels));
    image_ops::levels_to_signed_unit_(video);
    sample.set_tensor("video", video);
  }

#if WAM_WITH_CUDA
  // uint8 `video` that Augment made on the GPU (device frames) needs no copy, only the
  // normalisation, on the current stream, which the step waits for.
  static void normalise_video_levels_on_device(Sample& sample) {
    if (!sample.has("video") || sample.type("video") != FieldType::kTensor) return;
    const at::Tensor& levels = sample.tensor("video");
    if (!levels.is_cuda() || !is_video_levels("video", levels)) return;
    at::Tensor video = levels.to(normalised_dtype(levels));
    image_ops::levels_to_signed_unit_(video);
    sample.set_tensor("video", video);
  }

  std::vector<std::string> cpu_tensor_fields(const Sample& sample) const {
    std::vector<std::string> names;
    for (const auto& [name, value] : sample.fields()) {
      if (type_of(value) == FieldType::kTensor && !sample.tensor(name).is_cuda()) {
        names.push_back(name);
      }
    }
    return names;
  }

  // Blocking copies on the current stream, which the step's kernels share: they are not timed
  // apart (an event pair there would enclose the step's kernels too).
  void copy_pageable(Sample& sample) {
    for (const std::string& name : cpu_tensor_fields(sample)) {
      const at::Tensor& source = sample.tensor(name);
      const bool quantize = params_.video_as_uint8 && is_float_video(name, source);
      if (quantize || is_video_levels(name, source)) {
        const at::Tensor levels =
            (quantize ? image_ops::signed_unit_to_levels(source) : source).to(device_);
        bytes_copied_->add(static_cast<int64_t>(levels.nbytes()));
        at::Tensor video = levels.to(normalised_dtype(source));
        image_ops::levels_to_signed_unit_(video);
        sample.set_tensor(name, video);
      } else {
        bytes_copied_->add(static_cast<int64_t>(source.nbytes()));
        sample.set_tensor(name, source.to(device_));
      }
    }
  }

  // The pool, sized from the first batch. Pinned host memory counts against the run's host
  // memory budget: the budget grants as many buffers as fit (at least one).
  void create_pool(int64_t host_bytes, int64_t device_bytes) {
    int64_t buffers = params_.pool_batches;
    if (HostMemoryBudget* budget = context_->host_memory()) {
      buffers = budget->claim("pinned staging buffers", host_bytes, buffers, 1);
    }
    pool_ = std::make_shared<StagingPool>(device_, buffers, host_bytes, device_bytes);
    context_->log("HostToDevice: pinned pool of " + std::to_string(buffers) + " buffers x " +
                  std::to_string(host_bytes >> 20) + " MiB host, " +
                  std::to_string(device_bytes >> 20) + " MiB device");
  }

  void copy_pinned(Sample& sample) {
    std::vector<FieldLayout> layout;
    int64_t host_bytes = 0, device_bytes = 0;
    for (const std::string& name : cpu_tensor_fields(sample)) {
      FieldLayout f;
      f.name = name;
      f.source = sample.tensor(name);
      f.quantize = params_.video_as_uint8 && is_float_video(name, f.source);
      f.levels = f.quantize || is_video_levels(name, f.source);
      f.output_dtype = f.levels ? normalised_dtype(f.source) : f.source.scalar_type();
      f.output_bytes = f.source.numel() * static_cast<int64_t>(c10::elementSize(f.output_dtype));
      f.host_bytes = f.levels ? f.source.numel() : f.output_bytes;
      f.host_offset = host_bytes;
      host_bytes += align(f.host_bytes);
      f.device_bytes = f.host_bytes;
      f.device_offset = device_bytes;
      device_bytes += align(f.device_bytes);
      f.output_offset = f.device_offset;
      if (f.levels) {
        f.output_offset = device_bytes;
        device_bytes += align(f.output_bytes);
      }
      layout.push_back(std::move(f));
    }
    if (!pool_) create_pool(host_bytes, device_bytes);

    bool waited = false;
    const auto wait_start = std::chrono::steady_clock::now();
    const size_t index = pool_->acquire(waited);
    if (waited) {
      // Flow control, not transfer: the step still holds every buffer.
      pool_waits_->add();
      pool_wait_us_.add(std::chrono::duration_cast<std::chrono::microseconds>(
                            std::chrono::steady_clock::now() - wait_start)
                            .count());
    }
    StagingPool::Buffer& buffer = pool_->buffer(index);
    if (buffer.host.numel() < host_bytes || buffer.device.numel() < device_bytes) {
      const int64_t grown_host = host_bytes + host_bytes / 4;
      const int64_t grown_device = device_bytes + device_bytes / 4;
      context_->log("HostToDevice: batch " + sample.key() + " needs " + std::to_string(host_bytes) +
                    " host bytes, more than a pool buffer's " +
                    std::to_string(buffer.host.numel()) + "; growing that buffer to " +
                    std::to_string(grown_host) + " (raise the pool size for steadier memory)");
      pool_->allocate(buffer, grown_host, grown_device);
    }

    // Typed views of the staging buffers (offsets are aligned, so dtype views are valid).
    auto typed = [](const at::Tensor& bytes, int64_t offset, int64_t size, at::ScalarType dtype,
                    at::IntArrayRef sizes) {
      return bytes.narrow(0, offset, size).view(dtype).view(sizes);
    };
    const auto staging_start = std::chrono::steady_clock::now();
    for (const FieldLayout& f : layout) {
      const at::ScalarType staged = f.levels ? at::kByte : f.source.scalar_type();
      typed(buffer.host, f.host_offset, f.host_bytes, staged, f.source.sizes())
          .copy_(f.quantize ? image_ops::signed_unit_to_levels(f.source) : f.source);
    }
    staging_us_.add(std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now() - staging_start)
                        .count());
    {
      c10::cuda::CUDAStreamGuard guard(copy_stream_);
      const auto queued = std::chrono::steady_clock::now();
      // The previous batch in this buffer may still be read by the step's kernels.
      if (buffer.used) buffer.released.block(copy_stream_);
      at::cuda::CUDAEvent copy_began(cudaEventDefault);  // after that wait: flow control
      copy_began.record(copy_stream_);
      for (const FieldLayout& f : layout) {
        const at::ScalarType staged = f.levels ? at::kByte : f.source.scalar_type();
        at::Tensor target =
            typed(buffer.device, f.device_offset, f.device_bytes, staged, f.source.sizes());
        target.copy_(typed(buffer.host, f.host_offset, f.host_bytes, staged, f.source.sizes()),
                     /*non_blocking=*/true);
        if (f.levels) {
          at::Tensor video = typed(buffer.device, f.output_offset, f.output_bytes, f.output_dtype,
                                   f.source.sizes());
          video.copy_(target);
          image_ops::levels_to_signed_unit_(video);
        }
        bytes_copied_->add(f.host_bytes);
      }
      // Waited for here, on this stage's thread: the emitted batch is complete on the device.
      at::cuda::CUDAEvent copied(cudaEventDefault);
      copied.record(copy_stream_);
      copied.synchronize();
      const auto copy_us = static_cast<int64_t>(1e3 * copy_began.elapsed_time(copied));
      const auto waited_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::steady_clock::now() - queued)
                                 .count();
      copy_us_.add(copy_us);
      device_wait_us_.add(std::max<int64_t>(0, waited_us - copy_us));
    }
    for (const FieldLayout& f : layout) {
      sample.set_tensor(
          f.name, pool_->view(pool_, index, f.output_offset, f.source.sizes(), f.output_dtype));
    }
  }
#endif

  Params params_;
  Context* context_ = nullptr;
  at::Device device_ = at::Device(at::kCPU);
  Counter* bytes_copied_ = nullptr;
  Counter* pool_waits_ = nullptr;
  TimeTotal pool_wait_us_, staging_us_, copy_us_, device_wait_us_;
#if WAM_WITH_CUDA
  c10::cuda::CUDAStream copy_stream_ = c10::cuda::getDefaultCUDAStream();
  std::shared_ptr<StagingPool> pool_;
#endif
};

WAM_REGISTER_STAGE(HostToDeviceStage);

}  // namespace
}  // namespace wam::stages
