// Decodes chosen frames of one video file by presentation time: only the keyframe runs that hold
// requested frames are decoded (sparse), or a contiguous range frame by frame (full).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace at {
class Tensor;
}

namespace wam::video {

// Work done, reported by VideoDecode as counters.
struct DecodeStats {
  int64_t frames_decoded = 0;  // frames out of the decoder for this plan's packets, needed or not
  // Pictures no wanted frame needed and no other picture predicts from (H.264's non-reference
  // B-frames), their packets never sent to the decoder.
  int64_t frames_skipped = 0;
  // Frames a reader that keeps its decoder across seeks (NVDEC's) still held from the packets
  // sent before a seek, dropped when they come out after it: a flushing decoder discards them
  // unseen, so they are not in frames_decoded and both decoders count the same work.
  int64_t frames_held_across_seeks = 0;
  int64_t seeks = 0;
  int64_t readers_opened = 0;
  int64_t nvdec_readers_opened = 0;  // of readers_opened, those decoding on NVDEC
  int64_t nvdec_overflow = 0;        // readers asked for NVDEC, opened on the CPU: sessions full
  int64_t nvdec_refused = 0;  // readers asked for NVDEC, opened on the CPU: the GPU lacks the codec
  // Readers that moved to another file with their decoder (VideoReader::switch_file), where a
  // reader of that file would have been opened.
  int64_t decoders_moved = 0;
};

// Which decoder a reader runs: FFmpeg's software decoder of the stream's codec (libdav1d for AV1),
// or NVIDIA's hardware decoder (NVDEC) through FFmpeg's native decoder with its CUDA hwaccel, the
// decoded NV12 frames copied back to host memory and converted to RGB as the software decoder's
// are, or (DecoderChoice::device_frames) converted in device memory. The hardware decodes the same
// bitstream to the same YUV; the conversion from NV12 rather than planar 4:2:0 may round
// differently by a level.
enum class Decoder { kCpu, kNvdec };

// Empty when this process can decode on NVDEC on CUDA device `device` (the NVIDIA driver loads
// and FFmpeg opens the device); else why not, in words, e.g. "no NVIDIA driver (libcuda.so.1:
// cannot open shared object file: No such file or directory)". Probed once per device.
const std::string& nvdec_problem(int device);

// NVDEC readers open in this process now (each holds a hardware decoder session).
int64_t open_nvdec_readers();

// The decoder a reader is asked for. NVDEC sessions are bounded per process: a reader asked for
// NVDEC while `max_nvdec_sessions` NVDEC readers are open decodes on the CPU instead.
struct DecoderChoice {
  Decoder decoder = Decoder::kCpu;
  int device = 0;  // the CUDA device that decodes, for NVDEC
  int64_t max_nvdec_sessions = std::numeric_limits<int64_t>::max();
  // A stream NVDEC cannot decode (codec, profile, size) decodes on the CPU instead of failing
  // (decoder "auto").
  bool cpu_fallback = false;
  // Whether a seek flushes the decoder; unset: the CPU decoders flush, NVDEC readers do not.
  // FFmpeg's H.264 decoder rebuilds its context after a flush, and with the CUDA hwaccel that
  // re-creates the hardware decoder on every seek (libavcodec/h264dec.c, h264_decode_flush). A
  // reader that does not flush sends the keyframe's packets on, their timestamps moved into a
  // span of their own, and drops what the decoder still held from before the seek: every frame
  // up to the keyframe's own (docs/DESIGN.md section 4, "Seeking on NVDEC"). An NVDEC reader
  // opens without a flush too.
  std::optional<bool> flush_on_seek = std::nullopt;
  // NVDEC readers keep their frames in the memory of CUDA device `device`: read_frames() without
  // an output tensor returns them there (converted to RGB there), as it does, uploaded, the frames
  // of readers that decode on the CPU.
  bool device_frames = false;
};

// NV12 frames -> RGB, as the CPU decoders' frames are converted (libswscale's default ITU-R BT.601
// matrix, limited or full range; each chroma sample covering its 2x2 pixels), on the frames'
// device: luma uint8 [N, H, W], chroma uint8 [N, ceil(H / 2), 2 * ceil(W / 2)] (U and V
// interleaved) -> uint8 [N, H, W, 3]. How NVDEC frames kept in device memory become RGB in a
// build without the fused kernels; kernels/nv12_rgb.cu does the same arithmetic in one pass
// otherwise, and is tested against this. Not taken from NPP (nppiNV12ToRGB): agreeing with
// libswscale's rounding, which the CPU decoders' frames have, takes offsets of our own, and the
// GPU build links no further CUDA library.
at::Tensor nv12_to_rgb(const at::Tensor& luma, const at::Tensor& chroma, bool full_range);

// One open file, its video stream and a single-threaded decoder (parallelism comes from the
// graph). Frame k is the frame whose pts is `stream start + k / fps`. Not thread-safe.
// Every error is a wam::Error naming the file (and FFmpeg's message where FFmpeg failed).
class VideoReader {
 public:
  // With NVDEC asked for, a stream NVDEC cannot decode (codec, profile or size) is an error
  // naming the file (or decodes on the CPU, with choice.cpu_fallback), and a machine without NVDEC
  // one naming nvdec_problem()'s reason.
  explicit VideoReader(std::string path, const DecoderChoice& choice = {});
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const std::string& path() const;
  Decoder decoder() const;
  // Whether a seek leaves the decoder's state alone (DecoderChoice::flush_on_seek).
  bool keeps_decoder_across_seeks() const;

  // Moves the reader to the file at `path`, keeping its decoder, when that file's video stream
  // decodes as the current one's: the same codec, frame size, pixel format and parameter sets
  // (the extradata, byte for byte). Returns false and changes nothing otherwise. A file that
  // cannot be opened is an error naming it, and leaves the reader as it was; one that opens but
  // has no keyframe fails as a reader of it would, the reader then on that file. For NVDEC this
  // saves making a hardware decoder, which takes a while and is serialised across the process;
  // a reader that keeps its decoder across seeks goes on without a flush, as at a seek.
  bool switch_file(const std::string& path);
  // Why NVDEC gave the stream back to the CPU (DecoderChoice::cpu_fallback); empty otherwise.
  const std::string& nvdec_refusal() const;
  int width() const;
  int height() const;

  // Writes the frames at `indices` (any order, repeats allowed) as RGB into `out`, a contiguous
  // uint8 [indices.size(), H, W, 3] tensor, in the order given. Each needed frame is decoded once.
  // `out` may be in CUDA memory: an NVDEC reader then converts its frames there (nv12_rgb.cu), on
  // its own stream, and returns when they are written; a CPU reader uploads its frames.
  void read_frames(const std::vector<int64_t>& indices, double fps, at::Tensor& out,
                   DecodeStats& stats);
  // The same into a new tensor: in CUDA memory with DecoderChoice::device_frames.
  at::Tensor read_frames(const std::vector<int64_t>& indices, double fps, DecodeStats& stats);

  // The frames at `indices` (any order, repeats allowed) as RGB planes into `planes` (uint8
  // [indices.size(), 3, h, w] in host memory, unit column stride), converted straight from the
  // decoder's 4:2:0 at that size (at half the frame's width and height pixel_kernels'
  // halve_yuv420, at another plane_resize's Yuv420Resizer: only the output's pixels converted),
  // and, where `full` is defined, frame `indices[full_size]` also as full-size RGB into `full`
  // (uint8 [H, W, 3] contiguous), from the same decoding. Frames of other formats, or of an odd
  // size, go through RGB.
  void read_planes(const std::vector<int64_t>& indices, double fps, at::Tensor& planes,
                   size_t full_size, at::Tensor& full, DecodeStats& stats);

  // Every frame from `first` to `last` (inclusive), decoded in one forward pass: uint8
  // [last - first + 1, H, W, 3].
  at::Tensor read_range(int64_t first, int64_t last, double fps, DecodeStats& stats);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The readers one thread keeps open: consecutive samples mostly hit the same episode's files, so
// their decoders (and the container index) are reused instead of reopened.
class ReaderCache {
 public:
  // The reader of `path` with `decoder`, opened if it is not held; keeps the `capacity` most
  // recently used ones (0: nothing is kept, every call opens the file).
  std::shared_ptr<VideoReader> acquire(const std::string& path, size_t capacity, DecodeStats& stats,
                                       const DecoderChoice& choice = {});

 private:
  // Each reader with the decoder it was asked for (an NVDEC overflow runs on the CPU), most
  // recently used first.
  std::list<std::pair<Decoder, std::shared_ptr<VideoReader>>> readers_;
};

// Readers that the threads of a stage share: a thread borrows a file's idle reader for a sample
// and the reader comes back when the last copy of the returned pointer goes. NVDEC's readers are
// kept so: opening one creates a hardware decoder, which the driver serialises across the process,
// and with a cache per thread 16 threads reopened nearly every sample's files (docs/BENCHMARKS.md,
// "The capture gate and the data path on NVDEC"). Where no reader of the file is idle, an idle
// reader that keeps its decoder across seeks moves to the file with its decoder
// (VideoReader::switch_file), one of a file in the same folder (a LeRobot camera's episodes) if
// there is one, else of another folder; if the file decodes otherwise, it stays idle (or closes,
// where NVDEC's sessions are all held, to give its session to the file) and a reader opens. With
// more episodes than sessions, a sample otherwise made new hardware decoders for each of its files
// (docs/BENCHMARKS.md, "NVDEC's decoders moved between files").
class SharedReaderPool {
 public:
  // The reader of `path` with `choice.decoder` that no other thread holds: an idle one, else a new
  // one. The pool keeps the `capacity` most recently returned readers (0: none). Where NVDEC's
  // sessions are all held, the least recently returned idle NVDEC reader closes before a new one
  // opens, so its session goes to the file asked for.
  std::shared_ptr<VideoReader> acquire(const std::string& path, size_t capacity, DecodeStats& stats,
                                       const DecoderChoice& choice = {});

 private:
  struct Idle {
    std::mutex mutex;
    size_t capacity = 0;
    // Each reader with the decoder it was asked for, most recently returned first.
    std::list<std::pair<Decoder, std::unique_ptr<VideoReader>>> readers;
  };
  // Shared with the returned pointers' deleters, which may outlive the pool.
  std::shared_ptr<Idle> idle_ = std::make_shared<Idle>();
};

}  // namespace wam::video
