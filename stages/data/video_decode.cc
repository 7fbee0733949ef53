// VideoDecode: decodes the frames a sample needs from each camera's mp4, as RGB.
// Reads:  video_files (Json: one mp4 path per camera), frame_plan (Json: fps, anchor, recent,
//         window[9] frame indices inside the episode, optional video_offsets: per camera, the
//         episode's first frame in its file, for mp4s that hold several episodes)
// Writes: frames (uint8 [V, T, H, W, 3]): T = 11 in order [anchor, recent, window 0..8] for
//         `frames: all`, T = 1 (window[0]) for `frames: current`.
// `mode: sparse` decodes only the keyframe runs holding the needed frames; `mode: full` (the
// baseline) decodes every frame from the window's first to its last, plus anchor and recent.
// With `decode_if` naming a Bool field, samples where it is false pass through without frames
// (the cache profile decodes current frames only while its VLM cache misses samples).
// `frame_cache` (sparse mode) keeps that many decoded frames per worker thread, keyed by file and
// frame index, and decodes only the frames a sample needs that are not there: consecutive samples
// of an episode share most of their frames (`cache generate` decodes each frame about once).
// The run's host memory budget (wam/host_memory.h) may lower cache_readers, frame_cache and
// anchor_cache: the first sample's frame size prices them, and each is granted what the budget
// allows (never less than one sample needs), the same for every worker thread.
// `decoder: nvdec` decodes on NVIDIA's hardware decoder through FFmpeg (video_reader.h), the
// frames copied back to host memory, so everything after VideoDecode is unchanged, or, with
// `device_frames`, kept in GPU memory (`frames` a CUDA tensor, which Augment augments there); at
// most `nvdec_sessions` readers of the process hold an NVDEC session, later ones decode on the CPU.
// `auto` takes NVDEC where this machine has it, else the CPU, saying why in one line; it also
// decodes on the CPU the streams this GPU's NVDEC cannot (the H200's has no AV1: docs/
// BENCHMARKS.md, "NVDEC on the H200"), saying so once, where `nvdec` fails naming the file.
// `cpu_first` decodes a sample on the CPU unless `cpu_decodes` samples are decoding there and have
// been for most of the last `spill_after_s`; then on NVDEC, its frames kept in GPU memory (all of
// them, no frame_planes: Augment augments such a sample on the GPU). NVDEC's frames and Augment's
// kernels share the GPU with the step and slow it (docs/BENCHMARKS.md, "The data path beside the
// step"), so this spends GPU time on the data path only when the CPU falls behind. `planes_size`
// [H, W] (with `frames: all`) writes every frame also as RGB planes of that size, `frame_planes`
// (uint8 [V, T, 3, H, W]), the canvas's cameras for Augment's planes_from_decode: converted
// straight from the decoder's 4:2:0 at that size (RoboTwin's 640x480 cameras at 240x320: a quarter
// of the conversion, and a quarter of the bytes on to Augment; LIBERO's 512x512 at 192x256: a
// fifth), within a level of Augment's own stretch of the RGB frames. `frames` then holds only the
// current frame (window[0], T = 1), at full size for the VLM (docs/BENCHMARKS.md, "CPU data path
// per core" and "LIBERO's frames resized before their colour conversion", issue 24). `anchor_cache`
// (with planes_size) keeps the planes of that many anchors, shared by the workers: the anchor is
// the episode's first frame in every sample of the episode, so each sample would otherwise decode
// it after a seek of its own (about a tenth of LIBERO's decoding: docs/BENCHMARKS.md, "The
// episodes' anchors kept", issue 24). Counters: frames_decoded, frames_skipped (H.264 pictures no
// wanted frame needs and no other picture predicts from, left undecoded), seeks, readers_opened
// (and passed_through with decode_if, frame_cache_hits with frame_cache, anchor_cache_hits with
// anchor_cache, nvdec_readers_opened, nvdec_overflow, nvdec_refused, decoders_moved (readers moved
// to another file with their decoder) and frames_held_across_seeks on NVDEC; nvdec_samples with
// cpu_first). Example: {"id": "decode", "type": "VideoDecode", "inputs": ["sampler"],
//           "params": {"mode": "sparse", "frames": "all", "cache_readers": 4}}
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/cuda.h>
#include <torch/version.h>

#include "common/capture_gate.h"
#include "common/distributed.h"
#include "common/lru_cache.h"
#include "common/torch_threads.h"
#include "data/cpu_decode_slots.h"
#include "data/image_ops.h"
#include "data/video_reader.h"
#include "wam/host_memory.h"
#include "wam/limits.h"
#include "wam/per_thread.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

enum class DecodeMode { kSparse, kFull };
constexpr auto enum_names(DecodeMode) {
  return std::array{EnumName{DecodeMode::kSparse, "sparse"}, EnumName{DecodeMode::kFull, "full"}};
}

struct VideoDecodeParams {
  DecodeMode mode = DecodeMode::kSparse;
  std::string frames = "all";
  int64_t cache_readers = 4;
  std::string decode_if;
  int64_t frame_cache = 0;
  std::string decoder = "cpu";
  int64_t nvdec_sessions = 64;
  int64_t cpu_decodes = 0;
  double spill_after_s = 0.5;
  bool device_frames = false;
  std::vector<int64_t> planes_size;
  int64_t anchor_cache = 0;
  template <class V>
  void visit(V& v) {
    v("mode", mode,
      "sparse: decode only the keyframe runs holding needed frames; full: every frame of the "
      "window (baseline).");
    v("frames", frames, "all: anchor, recent and the 9 window frames; current: window[0] only.",
      OneOf{"all", "current"});
    v("cache_readers", cache_readers,
      "Open files kept per thread for the next samples (0: open every file per sample).", Min{0});
    v("decode_if", decode_if,
      "Bool field: decode only samples where it is true, pass the others through unchanged "
      "(\"\": decode every sample).");
    v("frame_cache", frame_cache,
      "Sparse mode: decoded frames kept per worker thread for the next samples (0: none; at "
      "least a sample's frames of every camera, e.g. 33 for 3 cameras).",
      Min{0});
    v("decoder", decoder,
      "cpu: FFmpeg's software decoders; nvdec: NVIDIA's hardware decoder through FFmpeg, frames "
      "copied back to host memory unless device_frames (refused at validate where the machine has "
      "none; a stream "
      "the GPU cannot decode is an error); auto: nvdec where the machine has it, else cpu, and "
      "cpu for the streams the GPU cannot decode (counted as nvdec_refused); cpu_first: cpu, and "
      "nvdec with the frames kept in GPU memory for the samples that find the CPU staying busy "
      "(cpu_decodes, spill_after_s; counted as nvdec_samples; Augment augments them on the GPU), "
      "cpu alone where the machine has no NVDEC. Which samples spill depends on timing, and a "
      "spilled sample's images are within a level of the CPU's, not the same bits (its sensor "
      "noise is drawn on the GPU): runs with cpu_first do not repeat bit for bit.",
      OneOf{"cpu", "nvdec", "auto", "cpu_first"});
    v("cpu_decodes", cpu_decodes,
      "decoder cpu_first: the samples decoding on the CPU at once that count as the CPU being "
      "busy (0: a quarter of the run's worker threads, at least one).",
      Min{0});
    v("spill_after_s", spill_after_s,
      "decoder cpu_first: how long the CPU must stay busy before samples go to NVDEC: the time "
      "constant, in seconds, of the moving average of the time at least cpu_decodes samples were "
      "decoding on the CPU; a sample that finds them so goes to NVDEC while that average is 3/4 "
      "or more (0: at once). Bursts shorter than it stay on the CPU.",
      Min{0.0});
    v("nvdec_sessions", nvdec_sessions,
      "NVDEC decoders open at once in the process (one per open reader); readers opened beyond "
      "them decode on the CPU, counted as nvdec_overflow.",
      Min{1});
    v("device_frames", device_frames,
      "Keep NVDEC's frames in GPU memory (converted to RGB there): `frames` is a CUDA tensor, "
      "and Augment runs on that GPU; frames decoded on the CPU (sessions beyond nvdec_sessions, "
      "streams NVDEC refuses) are uploaded. Needs decoder nvdec or auto and a CUDA device.");
    v("planes_size", planes_size,
      "[H, W]: also write frame_planes, every frame as RGB planes of this size (Augment's "
      "camera_size, for its planes_from_decode), resized and converted straight from the "
      "decoder's YUV 4:2:0 (only the output's pixels converted), within a level of Augment's "
      "stretch of the RGB frames; frames then holds only the current frame, at full size. []: "
      "off. Needs frames all, mode sparse, no frame_cache, host frames.",
      Min{1});
    v("anchor_cache", anchor_cache,
      "With planes_size: the planes of this many anchor frames (an episode's first frame, the "
      "same in every sample of the episode; one a camera file), kept for the samples after and "
      "shared by the workers, so that an episode's anchor is decoded once, not once a sample "
      "(0: none). No effect without planes_size, whose planes they are. The host memory budget "
      "may lower it.",
      Min{0});
  }

  void check(ParamChecker& c) const {
    if (!planes_size.empty()) {
      c.require(planes_size.size() == 2, "planes_size",
                "must be [H, W] or [], got " + std::to_string(planes_size.size()) + " values");
      c.require(frames == "all", "planes_size",
                "needs frames \"all\": with \"current\" only the VLM's full-size frames are "
                "decoded");
      c.require(mode == DecodeMode::kSparse, "planes_size",
                "needs mode \"sparse\" (the baseline's full decoding keeps the reference's RGB "
                "frames)");
      c.require(frame_cache == 0, "planes_size",
                "needs frame_cache 0: the frame cache holds full-size RGB frames");
      c.require(!device_frames, "planes_size",
                "needs frames in host memory: set device_frames false (Augment on the GPU "
                "resizes the device frames itself)");
    }
    if (decoder == "cpu_first") {
      c.require(!device_frames, "device_frames",
                "must be false with decoder \"cpu_first\", which keeps the frames of the samples "
                "NVDEC decodes in GPU memory and the CPU's in host memory");
      c.require(mode == DecodeMode::kSparse, "decoder",
                "\"cpu_first\" needs mode \"sparse\" (the baseline's full decoding stays on the "
                "CPU)");
      c.require(frame_cache == 0, "decoder",
                "\"cpu_first\" needs frame_cache 0: the frame cache holds host frames");
    }
    if (device_frames) {
      c.require(decoder != "cpu", "device_frames",
                "needs decoder \"nvdec\" or \"auto\": the CPU decoders' frames are in host "
                "memory (Augment's device \"cuda\" uploads them instead)");
      c.require(torch::cuda::is_available(), "device_frames",
                "needs a CUDA device, and this LibTorch (" TORCH_VERSION
                ") sees none; set it to false");
    }
    if (decoder == "cpu") return;
    // NVDEC's device is made here, before any stage opens, for auto and cpu_first too: FFmpeg sets
    // the flags of the GPU's primary context when it makes it, and refuses one that LibTorch has
    // already made with others ("Operation not supported"; docs/BENCHMARKS.md, "cpu_first: the
    // CPU first, NVDEC beyond it").
    const std::string& problem = video::nvdec_problem(nvdec_device());
    if (decoder == "nvdec" && !problem.empty()) {
      c.error("decoder",
              "\"nvdec\" needs NVIDIA's hardware decoder, and this machine has none: " + problem +
                  "; decode with \"cpu\", or \"auto\" to use it where present");
    }
  }

  // The GPU that decodes: the one this rank trains on (cuda:LOCAL_RANK, common/distributed.h).
  static int nvdec_device() { return dist::launch_env().local_rank; }
};

struct FramePlan {
  double fps = 0;
  int64_t anchor = 0;
  int64_t recent = 0;
  std::vector<int64_t> window;
  std::vector<int64_t> video_offsets;  // empty: every episode starts its file
};

FramePlan parse_frame_plan(const nlohmann::json& json) {
  FramePlan plan;
  try {
    plan.fps = json.at("fps").get<double>();
    plan.anchor = json.at("anchor").get<int64_t>();
    plan.recent = json.at("recent").get<int64_t>();
    plan.window = json.at("window").get<std::vector<int64_t>>();
    if (json.contains("video_offsets")) {
      plan.video_offsets = json.at("video_offsets").get<std::vector<int64_t>>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(
        "field frame_plan: expected {\"fps\": number, \"anchor\": int, \"recent\": int, "
        "\"window\": [int...]}, got " +
        json.dump() + " (" + e.what() + ")");
  }
  if (plan.window.empty()) throw Error("field frame_plan: \"window\" is empty");
  if (!(plan.fps > 0))
    throw Error("field frame_plan: \"fps\" must be positive, got " + json.dump());
  return plan;
}

std::vector<std::string> parse_video_files(const nlohmann::json& json) {
  if (!json.is_array() || json.empty() ||
      !std::all_of(json.begin(), json.end(), [](const auto& f) { return f.is_string(); })) {
    throw Error("field video_files: expected a non-empty array of mp4 paths, got " + json.dump());
  }
  return json.get<std::vector<std::string>>();
}

class VideoDecodeStage final : public Stage {
 public:
  static constexpr std::string_view kType = "VideoDecode";
  static constexpr std::string_view kSummary =
      "Decodes each camera's anchor, recent and window frames (sparse or full) as uint8 RGB.";
  using Params = VideoDecodeParams;

  explicit VideoDecodeStage(Params params) : params_(std::move(params)) {}

  void declare(Contract& contract) const override {
    contract.reads("video_files", FieldType::kJson);
    contract.reads("frame_plan", FieldType::kJson);
    contract.writes("frames", FieldType::kTensor);
    if (!params_.planes_size.empty()) contract.writes("frame_planes", FieldType::kTensor);
    if (!params_.decode_if.empty()) contract.reads(params_.decode_if, FieldType::kBool);
    contract.concurrency(Concurrency::unlimited());
  }

  void open(Context& context) override {
    context_ = &context;
    frames_decoded_ = &context.counter("frames_decoded");
    frames_skipped_ = &context.counter("frames_skipped");
    seeks_ = &context.counter("seeks");
    readers_opened_ = &context.counter("readers_opened");
    if (!params_.decode_if.empty()) passed_through_ = &context.counter("passed_through");
    if (params_.frame_cache > 0) frame_cache_hits_ = &context.counter("frame_cache_hits");
    if (params_.anchor_cache > 0 && !params_.planes_size.empty()) {
      anchor_cache_hits_ = &context.counter("anchor_cache_hits");
    }
    budget_ = context.host_memory();
    worker_threads_ = budget_ ? budget_->worker_threads() : max_threads();
    reader_capacity_.store(params_.cache_readers);
    frame_capacity_.store(params_.frame_cache);
    anchors_.reset(params_.planes_size.empty() ? 0 : params_.anchor_cache);
    choose_decoder(context);
    use_one_torch_thread();
  }

  void process(Sample sample, Emitter& out) override {
    if (!params_.decode_if.empty() && !sample.get_bool(params_.decode_if)) {
      passed_through_->add();
      out.emit(std::move(sample));
      return;
    }
    const std::vector<std::string> files = parse_video_files(sample.get_json("video_files"));
    const FramePlan plan = parse_frame_plan(sample.get_json("frame_plan"));
    if (!plan.video_offsets.empty() && plan.video_offsets.size() != files.size()) {
      throw Error("field frame_plan: " + std::to_string(plan.video_offsets.size()) +
                  " video_offsets for " + std::to_string(files.size()) + " video_files");
    }
    std::vector<int64_t> wanted = {plan.window.front()};
    if (params_.frames == "all") {
      wanted = {plan.anchor, plan.recent};
      wanted.insert(wanted.end(), plan.window.begin(), plan.window.end());
    }
    const CpuSlot slot(spill_ ? &cpu_slots_ : nullptr);
    const Route& route = slot.spilled() ? *spill_ : route_;
    video::DecodeStats stats;
    Decoded decoded;
    const auto decode = [&] {
      use_one_torch_thread();
      // NVDEC's readers (their opening and closing too) and device frames work on the GPU beside
      // the step's graph capture (common/capture_gate.h); released before the sample goes on.
      std::shared_lock<CaptureGate::Mutex> gpu_work;
      if (route.decoder.decoder == video::Decoder::kNvdec || route.frames_device.is_cuda()) {
        gpu_work = capture_gate().gpu_work();
      }
      decoded = decode_cameras(files, plan, wanted, route, stats);
    };
    // A spilled sample mostly waits on NVDEC (FFmpeg's CUDA device syncs by blocking): it waits
    // on a thread of the runtime's, and this worker decodes the next sample on the CPU meanwhile.
    // Its readers are the shared pool's, so nothing here is the worker thread's own.
    if (slot.spilled()) {
      context_->run_waiting(decode);
    } else {
      decode();
    }
    count(stats);
    if (slot.spilled()) nvdec_samples_->add();
    sample.set_tensor("frames", std::move(decoded.frames));
    if (decoded.planes.defined()) sample.set_tensor("frame_planes", std::move(decoded.planes));
    out.emit(std::move(sample));
  }

 private:
  // Which decoder a sample takes and where its frames are made.
  struct Route {
    video::DecoderChoice decoder;
    at::Device frames_device = at::kCPU;
  };

  // A sample's claim on cpu_first's slots: a slot held for its decoding, or spilled() to NVDEC.
  // No slots: never spilled.
  class CpuSlot {
   public:
    explicit CpuSlot(data::CpuDecodeSlots* slots)
        : spilled_(slots && slots->spill(data::CpuDecodeSlots::Clock::now())) {
      if (!spilled_) slots_ = slots;
    }
    ~CpuSlot() {
      if (slots_) slots_->release(data::CpuDecodeSlots::Clock::now());
    }
    CpuSlot(const CpuSlot&) = delete;
    CpuSlot& operator=(const CpuSlot&) = delete;
    bool spilled() const { return spilled_; }

   private:
    bool spilled_;
    data::CpuDecodeSlots* slots_ = nullptr;
  };

  struct Decoded {
    at::Tensor frames, planes;  // planes: with planes_size and host frames
  };

  // Each camera's `wanted` frames of one sample, decoded as `route` says.
  Decoded decode_cameras(const std::vector<std::string>& files, const FramePlan& plan,
                         const std::vector<int64_t>& wanted, const Route& route,
                         video::DecodeStats& stats) {
    // Each camera's reader is borrowed for its frames alone and given back before the next is
    // taken: with NVDEC's shared readers a thread then holds one hardware decoder, not one per
    // camera, and an idle one moves on to the next camera's file (video::SharedReaderPool).
    std::shared_ptr<video::VideoReader> reader = borrow_reader(files.front(), route.decoder, stats);
    const int width = reader->width(), height = reader->height();
    std::call_once(claimed_, [&] {
      claim_memory(width, height, static_cast<int64_t>(files.size()),
                   static_cast<int64_t>(std::set<int64_t>(wanted.begin(), wanted.end()).size()));
    });
    const auto cameras = static_cast<int64_t>(files.size());
    Decoded out;
    if (!params_.planes_size.empty() && !route.frames_device.is_cuda()) {
      out.frames = at::empty({cameras, 1, height, width, 3}, at::kByte);
      out.planes = at::empty({cameras, static_cast<int64_t>(wanted.size()), 3,
                              params_.planes_size[0], params_.planes_size[1]},
                             at::kByte);
    } else {
      out.frames = at::empty({cameras, static_cast<int64_t>(wanted.size()), height, width, 3},
                             at::TensorOptions().dtype(at::kByte).device(route.frames_device));
    }
    for (size_t v = 0; v < files.size(); ++v) {
      if (v > 0) reader = borrow_reader(files[v], route.decoder, stats);
      if (reader->width() != width || reader->height() != height) {
        throw Error("cameras of one sample must share a frame size: \"" + files.front() + "\" is " +
                    std::to_string(width) + "x" + std::to_string(height) + " but \"" +
                    reader->path() + "\" is " + std::to_string(reader->width()) + "x" +
                    std::to_string(reader->height()));
      }
      const std::vector<int64_t> indices = in_file(wanted, plan, v);
      const auto camera = static_cast<int64_t>(v);
      at::Tensor frames = out.frames[camera];
      if (out.planes.defined()) {
        // Every frame ([anchor, recent, window...]) as planes, the current one (window[0]) also
        // at full size.
        constexpr size_t kCurrent = 2;
        at::Tensor current = frames[0], camera_planes = out.planes[camera];
        if (anchors_.capacity() > 0) {
          read_planes_with_anchor(*reader, indices, plan.fps, camera_planes, kCurrent, current,
                                  stats);
        } else {
          reader->read_planes(indices, plan.fps, camera_planes, kCurrent, current, stats);
        }
      } else if (params_.mode == DecodeMode::kSparse && params_.frame_cache > 0) {
        read_through_cache(*reader, indices, plan.fps, frames, stats);
      } else if (params_.mode == DecodeMode::kSparse) {
        reader->read_frames(indices, plan.fps, frames, stats);
      } else {
        decode_full(*reader, indices, plan.fps, frames, stats);
      }
      reader.reset();  // an NVDEC reader given back may close its decoder, GPU work too
    }
    return out;
  }

  void count(const video::DecodeStats& stats) {
    frames_decoded_->add(stats.frames_decoded);
    frames_skipped_->add(stats.frames_skipped);
    seeks_->add(stats.seeks);
    readers_opened_->add(stats.readers_opened);
    if (nvdec_readers_opened_) {
      nvdec_readers_opened_->add(stats.nvdec_readers_opened);
      nvdec_overflow_->add(stats.nvdec_overflow);
      nvdec_refused_->add(stats.nvdec_refused);
      frames_held_across_seeks_->add(stats.frames_held_across_seeks);
      decoders_moved_->add(stats.decoders_moved);
    }
  }

  // The frames `wanted` of camera `camera` as indices in its file.
  static std::vector<int64_t> in_file(const std::vector<int64_t>& wanted, const FramePlan& plan,
                                      size_t camera) {
    std::vector<int64_t> indices = wanted;
    if (!plan.video_offsets.empty()) {
      for (int64_t& index : indices) index += plan.video_offsets[camera];
    }
    return indices;
  }

  // NVDEC for "nvdec", for "auto" where the machine has it, and for the samples cpu_first spills
  // where the machine has it; the log says which and why.
  void choose_decoder(Context& context) {
    route_ = {};
    spill_.reset();
    const int device = Params::nvdec_device();
    const at::Device gpu(at::kCUDA, static_cast<c10::DeviceIndex>(device));
    if (params_.device_frames) {
      route_.frames_device = gpu;
      route_.decoder.device_frames = true;
      route_.decoder.device = device;
    }
    if (params_.decoder == "cpu") return;
    const std::string& problem = video::nvdec_problem(device);
    if (!problem.empty()) {
      // "nvdec" was refused at validate; the machine may have changed since.
      if (params_.decoder == "nvdec")
        throw Error("VideoDecode: cannot decode on NVDEC: " + problem);
      context.log("VideoDecode: decoding on the CPU (decoder " + params_.decoder + "): " + problem);
      return;
    }
    video::DecoderChoice nvdec = route_.decoder;
    nvdec.decoder = video::Decoder::kNvdec;
    nvdec.device = device;
    nvdec.max_nvdec_sessions = params_.nvdec_sessions;
    nvdec.cpu_fallback = params_.decoder != "nvdec";
    nvdec_readers_opened_ = &context.counter("nvdec_readers_opened");
    nvdec_overflow_ = &context.counter("nvdec_overflow");
    nvdec_refused_ = &context.counter("nvdec_refused");
    frames_held_across_seeks_ = &context.counter("frames_held_across_seeks");
    decoders_moved_ = &context.counter("decoders_moved");
    const std::string sessions = "at most " + std::to_string(params_.nvdec_sessions) + " sessions";
    if (params_.decoder == "cpu_first") {
      nvdec.device_frames = true;
      spill_ = Route{nvdec, gpu};
      const int64_t slots = params_.cpu_decodes > 0
                                ? params_.cpu_decodes
                                : data::CpuDecodeSlots::default_limit(worker_threads_);
      cpu_slots_.reset(slots, params_.spill_after_s, data::CpuDecodeSlots::Clock::now());
      nvdec_samples_ = &context.counter("nvdec_samples");
      std::ostringstream window;
      window << params_.spill_after_s << " s";
      context.log("VideoDecode: decoding on the CPU, and on NVDEC (CUDA device " +
                  std::to_string(device) + ", frames kept in GPU memory, " + sessions + ") while " +
                  std::to_string(slots) +
                  " samples or more have been decoding on the CPU for most of the last " +
                  window.str() + " (decoder cpu_first)");
      return;
    }
    route_.decoder = nvdec;
    context.log("VideoDecode: decoding on NVDEC, CUDA device " + std::to_string(device) +
                " (decoder " + params_.decoder + "), " + sessions +
                (params_.device_frames ? ", frames kept in GPU memory" : ""));
  }

  // The reader of `file` for this sample. The CPU's readers are cached per worker thread (TBB
  // keeps running a node's samples on few threads, and consecutive samples mostly come from the
  // same episode); NVDEC's are shared by the threads, as their opening is slow and serialised
  // (video::SharedReaderPool), as many kept as the thread caches would keep together. A stream
  // NVDEC refused (decoder auto) is said once.
  std::shared_ptr<video::VideoReader> borrow_reader(const std::string& file,
                                                    const video::DecoderChoice& decoder,
                                                    video::DecodeStats& stats) {
    const auto per_thread = static_cast<size_t>(reader_capacity_.load());
    std::shared_ptr<video::VideoReader> reader =
        decoder.decoder == video::Decoder::kNvdec
            ? shared_readers_.acquire(file, per_thread * static_cast<size_t>(worker_threads_),
                                      stats, decoder)
            : reader_caches_.local().acquire(file, per_thread, stats, decoder);
    if (const std::string& refusal = reader->nvdec_refusal(); !refusal.empty()) {
      std::call_once(nvdec_refusal_said_, [&] {
        context_->log("VideoDecode: \"" + file + "\": " + refusal +
                      "; such streams decode on the CPU (decoder " + params_.decoder +
                      "; counted in nvdec_refused)");
      });
    }
    return reader;
  }

  // Claims the decoder sessions and cached frames of every worker thread from the budget, priced
  // by the first sample: `cameras` files of width x height, `unique_frames` frames from each.
  void claim_memory(int64_t width, int64_t height, int64_t cameras, int64_t unique_frames) {
    if (!budget_) return;
    const int64_t threads = budget_->worker_threads();
    // A decoder session holds its reference frames (AV1: 8, H.264: up to 16) and the one being
    // decoded in YUV 4:2:0 (1.5 bytes a pixel), and the RGB conversion's buffer: about 18 bytes
    // a pixel, an estimate (FFmpeg does not report its pools).
    if (params_.cache_readers > 0) {
      const int64_t sessions =
          budget_->claim("decoder sessions", 18 * width * height, params_.cache_readers * threads,
                         std::min(params_.cache_readers, cameras) * threads);
      reader_capacity_.store(std::max<int64_t>(1, sessions / threads));
    }
    // The kept anchors' planes, shared by the threads: at least one sample's, one a camera.
    if (params_.anchor_cache > 0 && !params_.planes_size.empty()) {
      anchors_.reset(budget_->claim("kept anchor planes",
                                    3 * params_.planes_size[0] * params_.planes_size[1],
                                    params_.anchor_cache, cameras));
    }
    // With device_frames the cached frames are in GPU memory, which this budget does not count.
    if (params_.mode == DecodeMode::kSparse && params_.frame_cache > 0 && !params_.device_frames) {
      const int64_t frames =
          budget_->claim("cached frames", 3 * width * height, params_.frame_cache * threads,
                         std::min(params_.frame_cache, cameras * unique_frames) * threads);
      frame_capacity_.store(frames / threads);
    }
  }

  // The baseline: every frame from the first to the last wanted window frame, decoded and
  // converted; anchor and recent, which may lie far before the window, are taken from that range
  // when inside, else decoded on their own.
  void decode_full(video::VideoReader& reader, const std::vector<int64_t>& wanted, double fps,
                   at::Tensor& out, video::DecodeStats& stats) const {
    // `wanted` is [anchor, recent, window...] or [window[0]].
    const auto window_begin = wanted.begin() + (params_.frames == "all" ? 2 : 0);
    const auto [low, high] = std::minmax_element(window_begin, wanted.end());
    const int64_t first = *low, last = *high;
    at::Tensor range = reader.read_range(first, last, fps, stats);
    std::vector<int64_t> outside;
    for (int64_t index : wanted) {
      if (index < first || index > last) outside.push_back(index);
    }
    at::Tensor extra;
    if (!outside.empty()) extra = reader.read_frames(outside, fps, stats);
    for (size_t i = 0, next_outside = 0; i < wanted.size(); ++i) {
      const int64_t index = wanted[i];
      const bool inside = index >= first && index <= last;
      out[static_cast<int64_t>(i)].copy_(inside ? range[index - first]
                                                : extra[static_cast<int64_t>(next_outside++)]);
    }
  }

  using FrameKey = std::pair<std::string, int64_t>;  // file, frame index
  using FrameCache = LruCache<FrameKey, at::Tensor>;

  // Copies the wanted frames from this thread's frame cache, decoding only the missing ones.
  void read_through_cache(video::VideoReader& reader, const std::vector<int64_t>& wanted,
                          double fps, at::Tensor& out, video::DecodeStats& stats) {
    std::unique_ptr<FrameCache>& cache = frame_caches_.local();
    const auto capacity = static_cast<size_t>(frame_capacity_.load());
    if (!cache || cache->capacity() != capacity) cache = std::make_unique<FrameCache>(capacity);
    const std::set<int64_t> unique(wanted.begin(), wanted.end());
    if (unique.size() > capacity) {
      throw Error("VideoDecode: param frame_cache (" + std::to_string(capacity) +
                  ") is smaller than the " + std::to_string(unique.size()) +
                  " frames one sample needs from " + reader.path());
    }
    std::vector<int64_t> missing;
    for (int64_t index : unique) {
      if (!cache->find({reader.path(), index})) missing.push_back(index);
    }
    frame_cache_hits_->add(static_cast<int64_t>(unique.size() - missing.size()));
    if (!missing.empty()) {
      const at::Tensor decoded = reader.read_frames(missing, fps, stats);
      for (size_t i = 0; i < missing.size(); ++i) {
        cache->insert({reader.path(), missing[i]}, decoded[static_cast<int64_t>(i)].clone());
      }
    }
    // The cache holds at least this sample's frames, so none of them was evicted above.
    for (size_t i = 0; i < wanted.size(); ++i) {
      out[static_cast<int64_t>(i)].copy_(*cache->find({reader.path(), wanted[i]}));
    }
  }

  // read_planes, the anchor (indices[0]) copied from the kept anchors where there, else decoded
  // with the others and kept. Decoding is deterministic, so a kept anchor is the same bytes as
  // the one decoded (the tests compare the two).
  void read_planes_with_anchor(video::VideoReader& reader, const std::vector<int64_t>& indices,
                               double fps, at::Tensor& planes, size_t current_slot,
                               at::Tensor& current, video::DecodeStats& stats) {
    const FrameKey key{reader.path(), indices.front()};
    if (const std::optional<at::Tensor> kept = anchors_.find(key)) {
      const std::vector<int64_t> others(indices.begin() + 1, indices.end());
      at::Tensor other_planes = planes.narrow(0, 1, planes.size(0) - 1);
      reader.read_planes(others, fps, other_planes, current_slot - 1, current, stats);
      planes[0].copy_(*kept);
      anchor_cache_hits_->add();
      return;
    }
    reader.read_planes(indices, fps, planes, current_slot, current, stats);
    anchors_.insert(key, planes[0].clone());
  }

  // The anchors' planes, shared by the worker threads: a least-recently-used map under a mutex
  // (a lookup a camera and sample, against tens of milliseconds of decoding).
  class SharedAnchors {
   public:
    void reset(int64_t capacity) {
      const std::lock_guard<std::mutex> lock(mutex_);
      cache_ = std::make_unique<FrameCache>(static_cast<size_t>(capacity));
    }
    size_t capacity() {
      const std::lock_guard<std::mutex> lock(mutex_);
      return cache_ ? cache_->capacity() : 0;
    }
    std::optional<at::Tensor> find(const FrameKey& key) {
      const std::lock_guard<std::mutex> lock(mutex_);
      const at::Tensor* found = cache_->find(key);
      return found ? std::optional<at::Tensor>(*found) : std::nullopt;
    }
    void insert(const FrameKey& key, at::Tensor planes) {
      const std::lock_guard<std::mutex> lock(mutex_);
      cache_->insert(key, std::move(planes));
    }

   private:
    std::mutex mutex_;
    std::unique_ptr<FrameCache> cache_;
  };

  Params params_;
  Counter* anchor_cache_hits_ = nullptr;
  Counter* frame_cache_hits_ = nullptr;
  Counter* frames_decoded_ = nullptr;
  Counter* frames_skipped_ = nullptr;
  Counter* seeks_ = nullptr;
  Counter* readers_opened_ = nullptr;
  Counter* passed_through_ = nullptr;
  Counter* nvdec_readers_opened_ = nullptr;
  Counter* nvdec_overflow_ = nullptr;
  Counter* nvdec_refused_ = nullptr;
  Counter* frames_held_across_seeks_ = nullptr;
  Counter* decoders_moved_ = nullptr;
  Context* context_ = nullptr;
  std::once_flag nvdec_refusal_said_;
  Route route_;  // frames_device: a GPU with device_frames
  // cpu_first where the machine has NVDEC: the route of a sample that finds every one of the
  // CPU slots saturated.
  std::optional<Route> spill_;
  data::CpuDecodeSlots cpu_slots_;
  Counter* nvdec_samples_ = nullptr;
  HostMemoryBudget* budget_ = nullptr;
  std::once_flag claimed_;
  std::atomic<int64_t> reader_capacity_{0}, frame_capacity_{0};  // per thread, after the budget
  PerThread<video::ReaderCache> reader_caches_;
  video::SharedReaderPool shared_readers_;
  int64_t worker_threads_ = 1;  // the run's, for the shared readers' capacity
  PerThread<std::unique_ptr<FrameCache>> frame_caches_;
  SharedAnchors anchors_;
};

}  // namespace

WAM_REGISTER_STAGE(VideoDecodeStage);

}  // namespace wam::stages
