#include "data/video_reader.h"

#include "data/video_io.h"

#include <torch/torch.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/dict.h>
#include <libavutil/hwcontext.h>
#include <libswscale/swscale.h>
}

#if WAM_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
extern "C" {
#include <libavutil/hwcontext_cuda.h>
#include <libavutil/pixdesc.h>
}
#endif

#include "common/io/ffmpeg.h"
#include "data/image_ops.h"
#include "data/pixel_kernels.h"
#include "data/plane_resize.h"
#if WAM_FUSED_KERNELS
#include "kernels/nv12_rgb.h"
#endif
#include "wam/error.h"
#include "wam/limits.h"

namespace wam::video {
namespace {

std::string seconds(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.3f s", value);
  return buffer;
}

std::string format_fps(double fps) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%g", fps);
  return buffer;
}

std::atomic<int64_t> nvdec_readers{0};

// Takes one of `limit` NVDEC sessions; false when all are taken.
bool take_nvdec_session(int64_t limit) {
  int64_t open = nvdec_readers.load();
  while (open < limit) {
    if (nvdec_readers.compare_exchange_weak(open, open + 1)) return true;
  }
  return false;
}

// FFmpeg's CUDA device on one GPU, shared by every NVDEC reader of the process (each decoder is a
// session on it), or why there is none. Kept for the life of the process.
struct NvdecDevice {
  AVBufferRef* context = nullptr;
  std::string problem;
};

const NvdecDevice& nvdec_device(int device) {
  static std::mutex mutex;
  static std::map<int, NvdecDevice> devices;  // never erased: references stay valid
  std::lock_guard lock(mutex);
  auto [it, inserted] = devices.try_emplace(device);
  NvdecDevice& found = it->second;
  if (!inserted) return found;
  // FFmpeg logs two lines of its own when the driver is missing: ask the loader first.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    found.problem = std::string("no NVIDIA driver (") + dlerror() + ")";
    return found;
  }
  dlclose(driver);
  const std::string name = std::to_string(device);
  AVDictionary* options = nullptr;
  // The GPU's primary context, which LibTorch uses too: no second context's memory per process.
  av_dict_set(&options, "primary_ctx", "1", 0);
  const int rc =
      av_hwdevice_ctx_create(&found.context, AV_HWDEVICE_TYPE_CUDA, name.c_str(), options, 0);
  av_dict_free(&options);
  if (rc < 0) {
    found.problem =
        "FFmpeg cannot open CUDA device " + name + " for NVDEC: " + ffmpeg::error_message(rc);
  }
  return found;
}

#if WAM_WITH_CUDA
// The CUDA device one NVDEC reader decodes on: the shared device's context (the GPU's primary
// one) with `stream`, the reader's own. FFmpeg's device runs every frame's mapping and copy on its
// stream, and the shared device's is the legacy default stream, on which the readers' copies run
// one at a time and wait for every other stream of the context (LibTorch's step included;
// docs/BENCHMARKS.md, "NVDEC on the H200"). LibTorch's pool streams are non-blocking. Null when
// FFmpeg cannot make one.
AVBufferRef* reader_device(int device, cudaStream_t stream) {
  AVBufferRef* shared = nvdec_device(device).context;
  AVBufferRef* own = av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA);
  if (own == nullptr) return nullptr;
  const auto cuda_of = [](AVBufferRef* ref) {
    return static_cast<AVCUDADeviceContext*>(
        reinterpret_cast<AVHWDeviceContext*>(ref->data)->hwctx);
  };
  // Not FFmpeg's to release: the shared device holds the primary context for the process.
  cuda_of(own)->cuda_ctx = cuda_of(shared)->cuda_ctx;
  cuda_of(own)->stream = stream;
  if (av_hwdevice_ctx_init(own) < 0) av_buffer_unref(&own);
  return own;
}

#if !WAM_FUSED_KERNELS
// A plane of a frame in device memory, as a uint8 [rows, columns] view (rows `pitch` bytes apart).
at::Tensor device_plane(uint8_t* data, int64_t rows, int64_t columns, int64_t pitch, int device) {
  return at::from_blob(data, {rows, columns}, {pitch, 1},
                       at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
}
#endif
#endif

// A decoder of `codec` that decodes on NVDEC through FFmpeg's CUDA hwaccel: the native one (for
// AV1 not libdav1d, FFmpeg's first choice, which is software only).
const AVCodec* nvdec_decoder(AVCodecID codec) {
  void* state = nullptr;
  while (const AVCodec* candidate = av_codec_iterate(&state)) {
    if (!av_codec_is_decoder(candidate) || candidate->id != codec) continue;
    for (int i = 0; const AVCodecHWConfig* config = avcodec_get_hw_config(candidate, i); ++i) {
      if (config->device_type == AV_HWDEVICE_TYPE_CUDA &&
          (config->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX)) {
        return candidate;
      }
    }
  }
  return nullptr;
}

// The distinct frames of a request (`indices`, any order, repeats allowed), ascending, and the
// position of each one's first request: each is decoded once, into that slot, and its repeats are
// copied from there.
struct RequestedFrames {
  std::vector<int64_t> targets;
  std::vector<int64_t> first_slot;

  explicit RequestedFrames(const std::vector<int64_t>& indices) : targets(indices) {
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
    first_slot.assign(targets.size(), -1);
    for (size_t i = 0; i < indices.size(); ++i) {
      int64_t& slot = first_slot[target_of(indices[i])];
      if (slot < 0) slot = static_cast<int64_t>(i);
    }
  }
  size_t target_of(int64_t index) const {
    return static_cast<size_t>(std::lower_bound(targets.begin(), targets.end(), index) -
                               targets.begin());
  }
  // Request i's slot when it repeats an earlier one, else -1.
  int64_t repeated_slot(const std::vector<int64_t>& indices, size_t i) const {
    const int64_t slot = first_slot[target_of(indices[i])];
    return slot == static_cast<int64_t>(i) ? -1 : slot;
  }
};

// A file's demuxer, its best video stream and that stream's software decoder.
struct OpenedStream {
  ffmpeg::InputFormat format;
  int stream_index = -1;
  const AVCodec* decoder = nullptr;
  AVStream* stream() const { return format->streams[stream_index]; }
};

OpenedStream open_stream(const std::string& path) {
  const auto fail = [&](const std::string& what, int code) {
    throw Error("video \"" + path + "\": " + what + ": " + ffmpeg::error_message(code));
  };
  // FFmpeg would wait forever for a writer of a FIFO.
  if (const std::string problem = regular_file_problem(path); !problem.empty()) {
    throw Error("cannot open video \"" + path + "\": " + problem);
  }
  OpenedStream opened;
  AVFormatContext* format = nullptr;
  int rc = avformat_open_input(&format, path.c_str(), nullptr, nullptr);
  if (rc < 0) throw Error("cannot open video \"" + path + "\": " + ffmpeg::error_message(rc));
  opened.format.reset(format);
  rc = avformat_find_stream_info(format, nullptr);
  if (rc < 0) fail("cannot read the stream info", rc);
  rc = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &opened.decoder, 0);
  if (rc == AVERROR_STREAM_NOT_FOUND) throw Error("video \"" + path + "\": has no video stream");
  if (rc < 0) fail("no decoder for its video stream", rc);
  opened.stream_index = rc;
  const AVCodecParameters* codecpar = opened.stream()->codecpar;
  if (codecpar->width <= 0 || codecpar->height <= 0) {
    throw Error("video \"" + path + "\": the video stream has no frame size");
  }
  return opened;
}

// Whether a decoder opened for stream `a` decodes stream `b` as it would decode its own: the same
// codec, frame size and pixel format, and the same parameter sets (H.264's SPS and PPS, AV1's
// sequence header), which the decoder reads from the extradata when it opens.
bool same_decoding(const AVCodecParameters* a, const AVCodecParameters* b) {
  return a->codec_id == b->codec_id && a->width == b->width && a->height == b->height &&
         a->format == b->format && a->profile == b->profile &&
         a->extradata_size == b->extradata_size &&
         (a->extradata_size == 0 ||
          std::memcmp(a->extradata, b->extradata, static_cast<size_t>(a->extradata_size)) == 0);
}

// A decoder kept across seeks and files tells the frames it still held from before a seek by
// their timestamps: the packets sent after the g-th such seek carry pts and dts moved by g times
// this span (a file's own timestamps stay far inside one: 2^39 ticks is over 70 days at 90 kHz),
// with g counted modulo kTimestampGenerations so that the sums stay inside 64 bits however long a
// run is (a held frame is a few seeks old, never 2^20).
constexpr int64_t kTimestampSpan = int64_t{1} << 40;
constexpr int64_t kTimestampGenerations = int64_t{1} << 20;

// How a stream's packets say that a picture is one no other picture predicts from: H.264 and HEVC
// in MP4, whose packets are NAL units each after its length (ISO/IEC 14496-15: the length's size
// in the avcC or hvcC record of the extradata). Other codecs and start-code streams are not parsed.
struct NalLayout {
  AVCodecID codec = AV_CODEC_ID_NONE;
  int length_size = 0;      // 0: not parsed
  int top_temporal_id = 0;  // HEVC: the stream's highest TemporalId
};

NalLayout nal_layout(const AVCodecParameters* codecpar) {
  const uint8_t* record = codecpar->extradata;
  const int size = codecpar->extradata_size;
  if (codecpar->codec_id == AV_CODEC_ID_H264 && size >= 7 && record[0] == 1) {
    return {AV_CODEC_ID_H264, (record[4] & 3) + 1, 0};  // lengthSizeMinusOne
  }
  if (codecpar->codec_id == AV_CODEC_ID_HEVC && size >= 23 && record[0] == 1) {
    // Byte 21: constantFrameRate (2 bits), numTemporalLayers (3; 0: unknown), temporalIdNested
    // (1), lengthSizeMinusOne (2).
    const int temporal_layers = (record[21] >> 3) & 7;
    if (temporal_layers > 0) return {AV_CODEC_ID_HEVC, (record[21] & 3) + 1, temporal_layers - 1};
  }
  return {};
}

// Whether a packet of `layout` holds a picture that no other picture predicts from, and no
// parameter set: H.264 slices with nal_ref_idc 0 (ITU-T H.264 7.4.1), HEVC's sub-layer
// non-reference slices (the even types below 16) at the stream's top TemporalId, which no higher
// sub-layer can predict from (ITU-T H.265 7.4.2.2). Hand-written: FFmpeg says so of a packet only
// where the container does (AV_PKT_FLAG_DISPOSABLE, from an MP4 'sdtp' box, which LeRobot's files
// lack), and its decoders' own skip_frame applies to every such picture, wanted or not.
bool disposable_picture(const uint8_t* data, int size, const NalLayout& layout) {
  if (layout.length_size == 0) return false;
  const bool hevc = layout.codec == AV_CODEC_ID_HEVC;
  const int header_size = hevc ? 2 : 1;
  bool has_slice = false;
  int at = 0;
  while (at < size) {
    if (size - at < layout.length_size + header_size) return false;
    int64_t length = 0;
    for (int k = 0; k < layout.length_size; ++k) length = (length << 8) | data[at + k];
    at += layout.length_size;
    if (length < header_size || length > size - at) return false;
    if (hevc) {
      const int type = (data[at] >> 1) & 0x3f;
      const int layer = ((data[at] & 1) << 5) | (data[at + 1] >> 3);
      const int temporal_id = (data[at + 1] & 7) - 1;
      if (layer != 0 || (type >= 32 && type <= 34)) return false;  // another layer; VPS, SPS, PPS
      if (type < 32) {
        if (type >= 16 || type % 2 != 0 || temporal_id != layout.top_temporal_id) return false;
        has_slice = true;
      }
    } else {
      if ((data[at] >> 5) & 3) return false;  // nal_ref_idc
      const int type = data[at] & 0x1f;
      has_slice = has_slice || (type >= 1 && type <= 5);
    }
    at += static_cast<int>(length);
  }
  return has_slice;
}

}  // namespace

at::Tensor nv12_to_rgb(const at::Tensor& luma, const at::Tensor& chroma, bool full_range) {
  const int64_t n = luma.size(0), height = luma.size(1), width = luma.size(2);
  const int64_t chroma_height = chroma.size(1), chroma_width = chroma.size(2) / 2;
  at::Tensor y = luma.to(at::kFloat);
  const at::Tensor uv = chroma.view({n, chroma_height, chroma_width, 2}).to(at::kFloat).sub_(128.0);
  // Each chroma sample covers its 2x2 pixels.
  const auto per_pixel = [&](const at::Tensor& plane) {
    return plane.unsqueeze(2)
        .unsqueeze(4)
        .expand({n, chroma_height, 2, chroma_width, 2})
        .reshape({n, 2 * chroma_height, 2 * chroma_width})
        .narrow(1, 0, height)
        .narrow(2, 0, width);
  };
  at::Tensor u = per_pixel(uv.select(3, 0));
  at::Tensor v = per_pixel(uv.select(3, 1));
  if (!full_range) {
    // Limited range: luma 16-235 and chroma 16-240 stretched to the full 0-255.
    y.sub_(16.0).mul_(255.0 / 219.0);
    u = u * (255.0 / 224.0);
    v = v * (255.0 / 224.0);
  }
  // ITU-R BT.601 (Kr 0.299, Kb 0.114), libswscale's default matrix. libswscale's integer
  // conversion, which makes the CPU decoders' frames, lands below the exact values, by 1 level for
  // red and blue and 1.5 for green in limited range, 0.5 and 1 in full range (fitted to it:
  // video_decode_test's Nv12ToRgbTest); taking the same off makes the two agree within a quarter
  // level on average instead of 0.8.
  const double red_blue_offset = full_range ? 0.5 : 1.0;
  const double green_offset = full_range ? 1.0 : 1.5;
  const at::Tensor red = y + 1.402 * v - red_blue_offset;
  const at::Tensor green = y - 0.344136 * u - 0.714136 * v - green_offset;
  const at::Tensor blue = y + 1.772 * u - red_blue_offset;
  return at::stack({red, green, blue}, 3).round_().clamp_(0.0, 255.0).to(at::kByte);
}

const std::string& nvdec_problem(int device) { return nvdec_device(device).problem; }

int64_t open_nvdec_readers() { return nvdec_readers.load(); }

struct VideoReader::Impl {
  std::string path;
  ffmpeg::InputFormat format;
  ffmpeg::CodecContext codec;
  ffmpeg::Packet packet;
  ffmpeg::Frame frame;
  ffmpeg::Scaler scaler;
  Decoder decoder_kind = Decoder::kCpu;  // the decoder running: NVDEC's sessions may be full
  bool holds_nvdec_session = false;
  // NVDEC: the decoder offered no CUDA format for the stream (beyond the hardware), and the
  // decoded frame copied to host memory (NV12), reused frame after frame.
  bool nvdec_refused = false;
  std::string nvdec_refusal;  // why NVDEC gave this stream back to the CPU (decoder "auto")
  ffmpeg::Frame host_frame;
  // NVDEC's NV12 frame split into YUV420P planes, and the context that splits it.
  ffmpeg::Frame planar_frame;
  ffmpeg::Scaler chroma_splitter;
  // to_planes(): a frame of a format other than 4:2:0 as full-size RGB, before its resize.
  std::vector<uint8_t> full_size_rgb;
  // to_planes(): 4:2:0 frames resized to planes of other than half their size.
  std::unique_ptr<plane_resize::Yuv420Resizer> yuv_resizer;
  std::pair<int64_t, int64_t> yuv_resizer_size;
#if WAM_WITH_CUDA
  // NVDEC: the reader's own stream (reader_device()), on which FFmpeg maps and copies each frame
  // and read_to_device copies and converts them.
  std::optional<c10::cuda::CUDAStream> nvdec_stream;
#endif
  int nvdec_gpu = 0;                    // the CUDA device NVDEC decodes on
  at::Device frames_device = at::kCPU;  // where read_frames() without an output puts frames
  int stream_index = -1;
  int width = 0;
  int height = 0;
  double time_base = 0;  // seconds per pts tick
  int64_t start_pts = 0;
  // Decode timestamps of the keyframes, ascending (the container index holds dts, not pts).
  std::vector<int64_t> keyframe_dts;
  // pts - dts of a keyframe: the constant decoding delay that B-frames add. Learned from the first
  // keyframe; a keyframe that breaks the assumption is caught when decoding starts too late.
  int64_t keyframe_pts_offset = 0;

  // Decoder position: valid between a seek and the end of the stream.
  bool positioned = false;
  bool input_ended = false;
  size_t reading_keyframe = 0;  // the keyframe run the last packet sent belongs to
  // The keyframe last seeked to: a demuxer may land before it, and must not be asked again.
  size_t sought_keyframe = 0;
  bool flush_on_seek = true;
  // After a seek without a flush: frames are dropped until the one whose pts is that of the first
  // keyframe packet sent since (unknown until it is sent).
  bool dropping_until_keyframe = false;
  std::optional<int64_t> awaited_keyframe_pts;
  int64_t last_output_index = std::numeric_limits<int64_t>::min();
  // The seeks without a flush so far (modulo kTimestampGenerations): the timestamps sent are
  // moved by this many kTimestampSpan. A move to another file (switch_file), or NVDEC's probe
  // at opening, leaves the demuxer where the next read must seek first.
  int64_t generation = 0;
  bool must_seek = false;
  NalLayout packet_nals;  // how the stream's packets hold NAL units, for disposable_picture
  // The frames decode() is after, for feed() to leave out the packets of pictures that no other
  // picture predicts from and that are not among them.
  struct Wanted {
    const std::vector<int64_t>* targets = nullptr;  // ascending
    double fps = 0;
    DecodeStats* stats = nullptr;
  };
  std::optional<Wanted> wanted;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("video \"" + path + "\": " + what);
  }
  [[noreturn]] void fail(const std::string& what, int code) const {
    fail(what + ": " + ffmpeg::error_message(code));
  }

  ~Impl() {
    codec.reset();  // the hardware session ends with the decoder
    if (holds_nvdec_session) --nvdec_readers;
  }

  // Picks NVDEC's frames in device memory; none offered means the hardware cannot decode it, or
  // FFmpeg could not set NVDEC's decoder up (it offers the formats again without CUDA then: out of
  // GPU memory for another decoder, on the H100 beside the step; docs/BENCHMARKS.md, issue 24).
  static AVPixelFormat cuda_format(AVCodecContext* context, const AVPixelFormat* offered) {
    for (const AVPixelFormat* format = offered; *format != AV_PIX_FMT_NONE; ++format) {
      if (*format == AV_PIX_FMT_CUDA) return *format;
    }
    static_cast<Impl*>(context->opaque)->nvdec_refused = true;
    return AV_PIX_FMT_NONE;
  }

  // The decoder of the stream that runs on NVDEC on `device`; fails naming why there is none.
  const AVCodec* nvdec_decoder_of_stream(int device) const {
    const AVCodecID id = format->streams[stream_index]->codecpar->codec_id;
    if (const std::string& problem = nvdec_problem(device); !problem.empty()) {
      fail("cannot decode on NVDEC: " + problem);
    }
    const AVCodec* decoder = nvdec_decoder(id);
    if (decoder == nullptr) {
      fail(std::string("NVDEC cannot decode its ") + avcodec_get_name(id) +
           " stream: FFmpeg has no decoder with a CUDA hwaccel for it");
    }
    return decoder;
  }

  // Has `codec` decode on NVDEC, its frames staying in device memory until to_rgb copies them
  // (or read_to_device converts them there).
  void attach_nvdec(int device) {
#if WAM_WITH_CUDA
    nvdec_stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false,
                                                static_cast<c10::DeviceIndex>(device));
    codec->hw_device_ctx = reader_device(device, nvdec_stream->stream());
#else
    codec->hw_device_ctx = av_buffer_ref(nvdec_device(device).context);
#endif
    nvdec_gpu = device;
    host_frame.reset(av_frame_alloc());
    planar_frame.reset(av_frame_alloc());
    if (!codec->hw_device_ctx || !host_frame || !planar_frame) {
      fail("cannot allocate a decoder", AVERROR(ENOMEM));
    }
    codec->opaque = this;
    codec->get_format = cuda_format;
  }

  // What a failure of the decoder means: NVDEC's refusal of the stream, said as such.
  [[noreturn]] void fail_decoding(const std::string& what, int code) const {
    if (nvdec_refused) {
      fail(
          "NVDEC cannot decode this stream (its profile, bit depth or frame size is beyond the "
          "hardware's, or the decoder could not be set up, e.g. out of GPU memory): decode it "
          "with decoder \"cpu\"");
    }
    fail(what, code);
  }

  void open(const DecoderChoice& choice) {
    OpenedStream opened = open_stream(path);
    format = std::move(opened.format);
    stream_index = opened.stream_index;
    const AVCodec* decoder = opened.decoder;
    AVStream* stream = format->streams[stream_index];
    width = stream->codecpar->width;
    height = stream->codecpar->height;
    packet_nals = nal_layout(stream->codecpar);

    packet.reset(av_packet_alloc());
    frame.reset(av_frame_alloc());
    if (!packet || !frame) fail("cannot allocate a decoder", AVERROR(ENOMEM));
    holds_nvdec_session =
        choice.decoder == Decoder::kNvdec && take_nvdec_session(choice.max_nvdec_sessions);
    open_decoder(holds_nvdec_session ? nvdec_decoder_of_stream(choice.device) : decoder,
                 choice.device);

    index_keyframes();
    learn_keyframe_offset(/*probe_nvdec=*/true);
    if (nvdec_refused) {
      const std::string why = std::string("NVDEC on CUDA device ") + std::to_string(choice.device) +
                              " cannot decode its " + avcodec_get_name(stream->codecpar->codec_id) +
                              " stream (the codec, profile, bit depth or frame size is beyond this "
                              "GPU's decoder, or the decoder could not be set up, e.g. out of GPU "
                              "memory)";
      if (!choice.cpu_fallback) fail(why + ": decode it with decoder \"cpu\" or \"auto\"");
      // decoder "auto": this stream decodes on the CPU, the session goes back.
      nvdec_refusal = why;
      nvdec_refused = false;
      holds_nvdec_session = false;
      --nvdec_readers;
      open_decoder(decoder, choice.device);
    }
    flush_on_seek = choice.flush_on_seek.value_or(!holds_nvdec_session);
    if (choice.device_frames) frames_device = at::Device(at::kCUDA, choice.device);
  }

  void index_keyframes() {
    AVStream* stream = format->streams[stream_index];
    time_base = av_q2d(stream->time_base);
    start_pts = stream->start_time == AV_NOPTS_VALUE ? 0 : stream->start_time;
    keyframe_dts.clear();
    for (int i = 0, n = avformat_index_get_entries_count(stream); i < n; ++i) {
      const AVIndexEntry* entry = avformat_index_get_entry(stream, i);
      if (entry->flags & AVINDEX_KEYFRAME) keyframe_dts.push_back(entry->timestamp);
    }
  }

  // Moves the reader, its decoder with it, to the file at `new_path` when that file's video
  // stream decodes as this one's (same_decoding); else returns false and changes nothing.
  bool switch_file(const std::string& new_path) {
    OpenedStream opened = open_stream(new_path);
    if (!same_decoding(format->streams[stream_index]->codecpar, opened.stream()->codecpar)) {
      return false;
    }
    path = new_path;
    format = std::move(opened.format);
    stream_index = opened.stream_index;
    index_keyframes();
    keyframe_pts_offset = 0;
    try {
      learn_keyframe_offset(/*probe_nvdec=*/false);
    } catch (...) {
      positioned = false;  // on a file it cannot read: the next seek starts the decoder afresh
      throw;
    }
    // A decoder that keeps its state across seeks goes on without a flush (which on NVDEC would
    // make a new hardware decoder) at the seek that must come next: the frames it still holds from
    // the earlier file carry an earlier generation's timestamps and are dropped as they come out.
    positioned = positioned && !input_ended && !flush_on_seek;
    must_seek = true;
    reading_keyframe = 0;
    sought_keyframe = 0;
    last_output_index = std::numeric_limits<int64_t>::min();
    return true;
  }

  // Opens `decoder` for the stream, on NVDEC while the reader holds a session.
  void open_decoder(const AVCodec* decoder, int device) {
    decoder_kind = holds_nvdec_session ? Decoder::kNvdec : Decoder::kCpu;
    codec.reset(avcodec_alloc_context3(decoder));
    if (!codec) fail("cannot allocate a decoder", AVERROR(ENOMEM));
    int rc = avcodec_parameters_to_context(codec.get(), format->streams[stream_index]->codecpar);
    if (rc < 0) fail("cannot configure the decoder", rc);
    codec->thread_count = 1;
    if (holds_nvdec_session) attach_nvdec(device);
    rc = avcodec_open2(codec.get(), decoder, nullptr);
    if (rc < 0) fail("cannot open the " + std::string(decoder->name) + " decoder", rc);
  }

  // Reads up to the first keyframe packet: its pts - dts is the decoding delay of keyframes. On
  // NVDEC the packet is also decoded, which makes the hardware say now whether it can decode the
  // stream (nvdec_refused), not at the first frame a sample asks for; the first read seeks anyway.
  void learn_keyframe_offset(bool probe_nvdec) {
    while (true) {
      int rc = av_read_frame(format.get(), packet.get());
      if (rc == AVERROR_EOF) fail("has no keyframe");
      if (rc < 0) fail("cannot read a packet", rc);
      bool found = packet->stream_index == stream_index && (packet->flags & AV_PKT_FLAG_KEY);
      if (found) {
        if (packet->pts != AV_NOPTS_VALUE && packet->dts != AV_NOPTS_VALUE) {
          keyframe_pts_offset = packet->pts - packet->dts;
        }
        // Without a container index the whole file is one run from its first keyframe.
        if (keyframe_dts.empty()) keyframe_dts.push_back(packet->dts);
        if (probe_nvdec && holds_nvdec_session) {
          // Any other failure is left to the decoding that reports it with the frame's time. No
          // flush after it: with the CUDA hwaccel a flush makes the next packet create a second
          // hardware decoder (see DecoderChoice::flush_on_seek); the first read seeks without one,
          // and the probe's frame, of the generation before, is dropped.
          const bool sent = avcodec_send_packet(codec.get(), packet.get()) == 0;
          positioned = sent && !nvdec_refused;
          must_seek = true;
        }
      }
      av_packet_unref(packet.get());
      if (found) return;
    }
  }

  int64_t index_of_pts(int64_t pts, double fps) const {
    return std::llround(static_cast<double>(pts - start_pts) * time_base * fps);
  }
  int64_t keyframe_index(size_t k, double fps) const {
    return index_of_pts(keyframe_dts[k] + keyframe_pts_offset, fps);
  }
  // The last keyframe at or before frame `index` (the first one when none is).
  size_t keyframe_for(int64_t index, double fps) const {
    size_t low = 0, high = keyframe_dts.size();  // answer in [low, high)
    while (high - low > 1) {
      size_t middle = low + (high - low) / 2;
      if (keyframe_index(middle, fps) <= index) {
        low = middle;
      } else {
        high = middle;
      }
    }
    return low;
  }
  size_t keyframe_of_dts(int64_t dts) const {
    auto it = std::upper_bound(keyframe_dts.begin(), keyframe_dts.end(), dts);
    return it == keyframe_dts.begin() ? 0 : static_cast<size_t>(it - keyframe_dts.begin() - 1);
  }

  // Demuxers differ in whether they search their index by dts (then the keyframe's pts finds the
  // same keyframe) or by pts (mp4 in FFmpeg 5.1, where its dts would land one keyframe early).
  void seek(size_t keyframe, DecodeStats& stats) {
    const int64_t pts = keyframe_dts[keyframe] + keyframe_pts_offset;
    int rc = av_seek_frame(format.get(), stream_index, pts, AVSEEK_FLAG_BACKWARD);
    if (rc < 0) fail("cannot seek to " + seconds((pts - start_pts) * time_base), rc);
    // A decoder told the stream ended, or left in an unknown state by an error, is always flushed.
    if (flush_on_seek || input_ended || !positioned) {
      avcodec_flush_buffers(codec.get());
      dropping_until_keyframe = false;
    } else {
      dropping_until_keyframe = true;
      generation = (generation + 1) % kTimestampGenerations;
    }
    awaited_keyframe_pts.reset();
    must_seek = false;
    ++stats.seeks;
    positioned = true;
    input_ended = false;
    reading_keyframe = keyframe;
    sought_keyframe = keyframe;
    last_output_index = std::numeric_limits<int64_t>::min();
  }

  // Seeking to `keyframe` pays when it starts a later run than the one being decoded and skips
  // frames that decoding through would have produced.
  bool worth_seeking(size_t keyframe, double fps) const {
    return keyframe > std::max(reading_keyframe, sought_keyframe) &&
           keyframe_index(keyframe, fps) > last_output_index + 1;
  }

  [[noreturn]] void frame_not_found(int64_t index, double fps) const {
    fail("has no frame at " + seconds(static_cast<double>(index) / fps) + " (frame " +
         std::to_string(index) + " at " + format_fps(fps) + " fps)");
  }

  // Whether `p` holds a picture that decode() does not want and that no other picture predicts
  // from: such a packet is left out, and counted, rather than decoded (B-frames that are not
  // references: 39% of the pictures the GR00T demo's samples reach; docs/BENCHMARKS.md,
  // "Pictures no wanted frame needs left undecoded").
  bool unwanted_and_disposable(const AVPacket& p) {
    if (!wanted || (p.flags & AV_PKT_FLAG_KEY) || p.pts == AV_NOPTS_VALUE) return false;
    const bool disposable =
        (p.flags & AV_PKT_FLAG_DISPOSABLE) || disposable_picture(p.data, p.size, packet_nals);
    if (!disposable) return false;
    const std::vector<int64_t>& targets = *wanted->targets;
    if (std::binary_search(targets.begin(), targets.end(), index_of_pts(p.pts, wanted->fps))) {
      return false;
    }
    ++wanted->stats->frames_skipped;
    return true;
  }

  // Sends the next packet of the stream to the decoder (the end-of-stream flush after the last).
  // Returns false when the decoder has been told that the stream ended.
  bool feed() {
    if (input_ended) return false;
    while (true) {
      int rc = av_read_frame(format.get(), packet.get());
      if (rc == AVERROR_EOF) {
        input_ended = true;
        rc = avcodec_send_packet(codec.get(), nullptr);
        if (rc < 0 && rc != AVERROR_EOF) fail("cannot flush the decoder", rc);
        return true;
      }
      if (rc < 0) fail("cannot read a packet", rc);
      if (packet->stream_index != stream_index || unwanted_and_disposable(*packet)) {
        av_packet_unref(packet.get());
        continue;
      }
      if ((packet->flags & AV_PKT_FLAG_KEY) && packet->dts != AV_NOPTS_VALUE) {
        reading_keyframe = keyframe_of_dts(packet->dts);
      }
      if (dropping_until_keyframe && !awaited_keyframe_pts && (packet->flags & AV_PKT_FLAG_KEY)) {
        if (packet->pts == AV_NOPTS_VALUE) {
          // No pts to wait for: flush now, which is the flush at the seek, as nothing of the
          // keyframe's run has been sent yet.
          avcodec_flush_buffers(codec.get());
          dropping_until_keyframe = false;
        } else {
          awaited_keyframe_pts = packet->pts + generation * kTimestampSpan;
        }
      }
      int64_t pts = packet->pts;
      if (generation > 0) {
        const int64_t shift = generation * kTimestampSpan;
        if (packet->pts != AV_NOPTS_VALUE) packet->pts += shift;
        if (packet->dts != AV_NOPTS_VALUE) packet->dts += shift;
      }
      rc = avcodec_send_packet(codec.get(), packet.get());
      av_packet_unref(packet.get());
      if (rc < 0) {
        fail_decoding("cannot decode the packet at " + seconds((pts - start_pts) * time_base), rc);
      }
      return true;
    }
  }

  // Decodes the ascending, distinct frame `targets` and hands each one's decoded frame to `sink`
  // with its position in `targets`. A new forward pass starts (seek to the keyframe run of the
  // next target) only when that skips frames; within a run it decodes through.
  void decode(const std::vector<int64_t>& targets, double fps,
              const std::function<void(size_t, const AVFrame*)>& sink, DecodeStats& stats) {
    wanted = Wanted{&targets, fps, &stats};
    try {
      decode_targets(targets, fps, sink, stats);
    } catch (...) {
      wanted.reset();
      positioned = false;  // the decoder is mid-stream in an unknown state: seek before reuse
      throw;
    }
    wanted.reset();
  }

  void decode_targets(const std::vector<int64_t>& targets, double fps,
                      const std::function<void(size_t, const AVFrame*)>& sink, DecodeStats& stats) {
    size_t next = 0;
    while (next < targets.size()) {
      int64_t target = targets[next];
      if (target < 0) frame_not_found(target, fps);
      size_t keyframe = keyframe_for(target, fps);
      bool behind = target <= last_output_index;
      if (!positioned || must_seek || behind || worth_seeking(keyframe, fps)) {
        seek(keyframe, stats);
        next = decode_pass(targets, next, fps, sink, stats, keyframe);
      } else {
        next = decode_pass(targets, next, fps, sink, stats, std::nullopt);
      }
    }
  }

  // Decodes forward until targets[next..] are done or the next one lies in a later keyframe run
  // worth a seek. `seeked_to` is the keyframe just seeked to: when its first frame is already past
  // the target (a keyframe with a larger decoding delay than learned), the pass restarts one
  // keyframe earlier.
  size_t decode_pass(const std::vector<int64_t>& targets, size_t next, double fps,
                     const std::function<void(size_t, const AVFrame*)>& sink, DecodeStats& stats,
                     std::optional<size_t> seeked_to) {
    while (true) {
      int rc = avcodec_receive_frame(codec.get(), frame.get());
      if (rc == AVERROR(EAGAIN)) {
        if (!feed()) frame_not_found(targets[next], fps);
        continue;
      }
      if (rc == AVERROR_EOF) frame_not_found(targets[next], fps);
      if (rc < 0) fail_decoding("cannot decode a frame", rc);
      int64_t pts = frame->best_effort_timestamp != AV_NOPTS_VALUE ? frame->best_effort_timestamp
                                                                   : frame->pts;
      if (dropping_until_keyframe) {
        if (!awaited_keyframe_pts || frame->pts != *awaited_keyframe_pts) {
          ++stats.frames_held_across_seeks;
          continue;
        }
        dropping_until_keyframe = false;
      }
      // Frames held from before the seek came out above, as theirs are another generation's
      // timestamps, never the awaited keyframe's.
      if (pts != AV_NOPTS_VALUE) pts -= generation * kTimestampSpan;
      ++stats.frames_decoded;
      int64_t index = index_of_pts(pts, fps);
      if (seeked_to && index > targets[next]) {
        if (*seeked_to == 0) frame_not_found(targets[next], fps);
        seek(*seeked_to - 1, stats);
        seeked_to = *seeked_to - 1;
        continue;
      }
      seeked_to.reset();
      last_output_index = index;
      while (next < targets.size() && targets[next] == index) sink(next++, frame.get());
      if (next == targets.size()) return next;
      if (targets[next] < index) frame_not_found(targets[next], fps);
      if (worth_seeking(keyframe_for(targets[next], fps), fps)) return next;
    }
  }

  void check_frame_size(const AVFrame* decoded) const {
    if (decoded->width != width || decoded->height != height) {
      fail("a frame is " + std::to_string(decoded->width) + "x" + std::to_string(decoded->height) +
           " but the stream is " + std::to_string(width) + "x" + std::to_string(height));
    }
  }

  // NVDEC hands over NV12 where the CPU decoders of the same 8-bit 4:2:0 streams give YUV420P.
  // Splitting the interleaved chroma first (swscale's unscaled path: an exact copy) gives both the
  // same YUV -> RGB conversion; swscale's own NV12 -> RGB path rounds the chroma differently, 4
  // levels a pixel apart on average (docs/BENCHMARKS.md, "NVDEC on the H200").
  const AVFrame* planar_from_nv12(const AVFrame* nv12) {
    if (nv12->format != AV_PIX_FMT_NV12) return nv12;
    if (planar_frame->data[0] == nullptr) {
      planar_frame->format = AV_PIX_FMT_YUV420P;
      planar_frame->width = width;
      planar_frame->height = height;
      const int rc = av_frame_get_buffer(planar_frame.get(), 0);
      if (rc < 0) fail("cannot allocate a frame", rc);
    }
    chroma_splitter.reset(sws_getCachedContext(chroma_splitter.release(), width, height,
                                               AV_PIX_FMT_NV12, width, height, AV_PIX_FMT_YUV420P,
                                               SWS_POINT, nullptr, nullptr, nullptr));
    if (!chroma_splitter) fail("cannot convert NVDEC's NV12 frames to YUV420P");
    sws_scale(chroma_splitter.get(), nv12->data, nv12->linesize, 0, height, planar_frame->data,
              planar_frame->linesize);
    return planar_frame.get();
  }

#if WAM_WITH_CUDA
  // Decodes `requested.targets` on NVDEC and writes frame `indices[i]` to out[i] (uint8
  // [indices, H, W, 3] in device memory) without leaving the GPU. Each decoded NV12 frame is read
  // out of FFmpeg's surface on the reader's stream, which orders that after FFmpeg's mapping and
  // before the surface's reuse: converted straight into its slot by kernels/nv12_rgb.cu, or, in a
  // build without the fused kernels, copied out and converted with the others by nv12_to_rgb.
  void read_to_device(const std::vector<int64_t>& indices, const RequestedFrames& requested,
                      double fps, at::Tensor& out, DecodeStats& stats) {
    const c10::cuda::CUDAStream stream = *nvdec_stream;
    // `out` was made on the caller's stream, where earlier work may still use its memory.
    at::cuda::CUDAEvent made;
    made.record(c10::cuda::getCurrentCUDAStream(out.device().index()));
    made.block(stream);
    const c10::cuda::CUDAStreamGuard guard(stream);
    const auto check_nv12 = [&](const AVFrame* decoded) {
      if (decoded->format != AV_PIX_FMT_CUDA) {
        fail("NVDEC returned a frame in host memory, not CUDA memory");
      }
      const auto* surfaces =
          reinterpret_cast<const AVHWFramesContext*>(decoded->hw_frames_ctx->data);
      if (surfaces->sw_format != AV_PIX_FMT_NV12) {
        fail(std::string("NVDEC decodes its frames as ") +
             av_get_pix_fmt_name(surfaces->sw_format) +
             ", and only 8-bit NV12 frames stay in device memory: decode with "
             "device_frames off");
      }
      check_frame_size(decoded);
    };
#if WAM_FUSED_KERNELS
    const int64_t frame_bytes = int64_t{height} * width * 3;
    uint8_t* base = out.data_ptr<uint8_t>();
    decode(
        requested.targets, fps,
        [&](size_t t, const AVFrame* decoded) {
          check_nv12(decoded);
          const kernels::Nv12Frame frame{decoded->data[0],
                                         decoded->linesize[0],
                                         decoded->data[1],
                                         decoded->linesize[1],
                                         height,
                                         width,
                                         decoded->color_range == AVCOL_RANGE_JPEG};
          kernels::nv12_to_rgb(frame, base + requested.first_slot[t] * frame_bytes, 3 * width,
                               stream.stream());
        },
        stats);
    for (size_t i = 0; i < indices.size(); ++i) {
      if (const int64_t slot = requested.repeated_slot(indices, i); slot >= 0) {
        out[static_cast<int64_t>(i)].copy_(out[slot]);
      }
    }
#else
    const auto options = at::TensorOptions().dtype(at::kByte).device(out.device());
    const auto count = static_cast<int64_t>(requested.targets.size());
    const int64_t chroma_height = (height + 1) / 2, chroma_width = 2 * ((width + 1) / 2);
    at::Tensor luma = at::empty({count, height, width}, options);
    at::Tensor chroma = at::empty({count, chroma_height, chroma_width}, options);
    bool full_range = false;
    decode(
        requested.targets, fps,
        [&](size_t t, const AVFrame* decoded) {
          check_nv12(decoded);
          full_range = decoded->color_range == AVCOL_RANGE_JPEG;
          const auto slot = static_cast<int64_t>(t);
          luma[slot].copy_(
              device_plane(decoded->data[0], height, width, decoded->linesize[0], nvdec_gpu));
          chroma[slot].copy_(device_plane(decoded->data[1], chroma_height, chroma_width,
                                          decoded->linesize[1], nvdec_gpu));
        },
        stats);
    const at::Tensor rgb = nv12_to_rgb(luma, chroma, full_range);
    for (size_t i = 0; i < indices.size(); ++i) {
      out[static_cast<int64_t>(i)].copy_(
          rgb[static_cast<int64_t>(requested.target_of(indices[i]))]);
    }
#endif
    // The caller's stream reads `out` next: it is whole before this returns. A blocking-sync
    // event lets the thread sleep meanwhile; a stream synchronize may spin a core.
    at::cuda::CUDAEvent written(cudaEventBlockingSync | cudaEventDisableTiming);
    written.record(stream);
    written.synchronize();
  }
#endif

  // A decoded frame in host memory, of the stream's size: NVDEC's copied there and split into
  // YUV420P planes (planar_from_nv12), a CPU decoder's as it is.
  const AVFrame* in_host_memory(const AVFrame* decoded) {
    if (decoded->format == AV_PIX_FMT_CUDA) {
      const int rc = av_hwframe_transfer_data(host_frame.get(), decoded, 0);
      if (rc < 0) {
        av_frame_unref(host_frame.get());
        fail("cannot copy an NVDEC frame to host memory", rc);
      }
      check_frame_size(host_frame.get());  // before the splitter reads it at the stream's size
      decoded = planar_from_nv12(host_frame.get());
    }
    check_frame_size(decoded);
    return decoded;
  }

  // Converts a decoded frame to packed RGB24 at `rgb` (H * W * 3 bytes); NVDEC's from host
  // memory, where it is copied first.
  void to_rgb(const AVFrame* decoded, uint8_t* rgb) {
    decoded = in_host_memory(decoded);
    // Frees the old context itself when it returns another one (or none).
    scaler.reset(sws_getCachedContext(scaler.release(), width, height,
                                      static_cast<AVPixelFormat>(decoded->format), width, height,
                                      AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr));
    if (!scaler) fail("cannot convert its pixel format to RGB");
    uint8_t* planes[1] = {rgb};
    const int strides[1] = {3 * width};
    sws_scale(scaler.get(), decoded->data, decoded->linesize, 0, height, planes, strides);
  }

  // Converts a decoded frame to RGB planes of `out_height` x `out_width` at `red`, `green`, `blue`
  // (rows `out_row` bytes apart) straight from 4:2:0: at half its size pixel_kernels'
  // halve_yuv420, at another size plane_resize's Yuv420Resizer (NVDEC's frames in host memory
  // first); other formats, and odd sizes, through to_rgb, then halve_rgb or image_ops' stretch.
  void to_planes(const AVFrame* decoded, int64_t out_height, int64_t out_width, uint8_t* red,
                 uint8_t* green, uint8_t* blue, int64_t out_row) {
    decoded = in_host_memory(decoded);
    // The kernels take even sizes of at least 8 (chroma of exactly half the luma).
    const bool even = width % 2 == 0 && height % 2 == 0 && width >= 8 && height >= 8;
    const bool halving = even && 2 * out_height == height && 2 * out_width == width;
    // libswscale reads the range from the format alone (the J formats are full range), and so
    // does this, so that the two conversions agree.
    const auto format = static_cast<AVPixelFormat>(decoded->format);
    if (even && (format == AV_PIX_FMT_YUV420P || format == AV_PIX_FMT_YUVJ420P)) {
      const bool full_range = format == AV_PIX_FMT_YUVJ420P;
      if (halving) {
        pixel_kernels::halve_yuv420(decoded->data[0], decoded->linesize[0], decoded->data[1],
                                    decoded->data[2], decoded->linesize[1], height, width,
                                    full_range, red, green, blue, out_row);
      } else {
        if (!yuv_resizer || yuv_resizer_size != std::pair{out_height, out_width}) {
          yuv_resizer = plane_resize::Yuv420Resizer::make(
              width, height, static_cast<int>(out_width), static_cast<int>(out_height));
          yuv_resizer_size = {out_height, out_width};
        }
        yuv_resizer->resize(decoded->data[0], decoded->linesize[0], decoded->data[1],
                            decoded->data[2], decoded->linesize[1], full_range, red, green, blue,
                            out_row);
      }
      return;
    }
    full_size_rgb.resize(static_cast<size_t>(3 * width * height));
    to_rgb(decoded, full_size_rgb.data());
    if (halving) {
      pixel_kernels::halve_rgb(full_size_rgb.data(), height, width, red, green, blue, out_row);
      return;
    }
    const at::Tensor frame = at::from_blob(full_size_rgb.data(), {1, height, width, 3}, at::kByte);
    const at::Tensor planes = image_ops::frames_to_planes_as(
        frame, out_height, out_width, image_ops::ResizeMode::kStretch, /*fill=*/0)[0];
    uint8_t* const out[3] = {red, green, blue};
    for (int64_t c = 0; c < 3; ++c) {
      at::from_blob(out[c], {out_height, out_width}, {out_row, 1}, at::kByte).copy_(planes[c]);
    }
  }
};

VideoReader::VideoReader(std::string path, const DecoderChoice& choice)
    : impl_(std::make_unique<Impl>()) {
  quiet_codec_logs();
  impl_->path = std::move(path);
  impl_->open(choice);
}

VideoReader::~VideoReader() = default;

const std::string& VideoReader::path() const { return impl_->path; }
Decoder VideoReader::decoder() const { return impl_->decoder_kind; }
bool VideoReader::keeps_decoder_across_seeks() const { return !impl_->flush_on_seek; }
bool VideoReader::switch_file(const std::string& path) { return impl_->switch_file(path); }
const std::string& VideoReader::nvdec_refusal() const { return impl_->nvdec_refusal; }
int VideoReader::width() const { return impl_->width; }
int VideoReader::height() const { return impl_->height; }

void VideoReader::read_frames(const std::vector<int64_t>& indices, double fps, at::Tensor& out,
                              DecodeStats& stats) {
  Impl& r = *impl_;
  if (!(fps > 0)) r.fail("fps must be positive, got " + format_fps(fps));
  const int64_t frame_bytes = int64_t{r.height} * r.width * 3;
  if (out.scalar_type() != at::kByte || !out.is_contiguous() ||
      out.sizes() != at::IntArrayRef{static_cast<int64_t>(indices.size()), r.height, r.width, 3}) {
    r.fail("the output tensor must be contiguous uint8 [" + std::to_string(indices.size()) + ", " +
           std::to_string(r.height) + ", " + std::to_string(r.width) + ", 3]");
  }
  if (out.is_cuda() && r.decoder_kind == Decoder::kCpu) {
    // Decoded on the CPU (NVDEC's sessions full, or a stream it refused): uploaded.
    at::Tensor host = at::empty(out.sizes(), at::kByte);
    read_frames(indices, fps, host, stats);
    out.copy_(host);
    return;
  }
  const RequestedFrames requested(indices);
#if WAM_WITH_CUDA
  if (out.is_cuda()) {
    r.read_to_device(indices, requested, fps, out, stats);
    return;
  }
#endif
  uint8_t* base = out.data_ptr<uint8_t>();
  r.decode(
      requested.targets, fps,
      [&](size_t t, const AVFrame* decoded) {
        r.to_rgb(decoded, base + requested.first_slot[t] * frame_bytes);
      },
      stats);
  for (size_t i = 0; i < indices.size(); ++i) {
    if (const int64_t slot = requested.repeated_slot(indices, i); slot >= 0) {
      std::memcpy(base + i * frame_bytes, base + slot * frame_bytes, frame_bytes);
    }
  }
}

at::Tensor VideoReader::read_frames(const std::vector<int64_t>& indices, double fps,
                                    DecodeStats& stats) {
  at::Tensor out = at::empty({static_cast<int64_t>(indices.size()), impl_->height, impl_->width, 3},
                             at::TensorOptions().dtype(at::kByte).device(impl_->frames_device));
  read_frames(indices, fps, out, stats);
  return out;
}

at::Tensor VideoReader::read_range(int64_t first, int64_t last, double fps, DecodeStats& stats) {
  if (last < first) {
    impl_->fail("empty frame range " + std::to_string(first) + ".." + std::to_string(last));
  }
  std::vector<int64_t> indices(static_cast<size_t>(last - first + 1));
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = first + static_cast<int64_t>(i);
  return read_frames(indices, fps, stats);
}

void VideoReader::read_planes(const std::vector<int64_t>& indices, double fps, at::Tensor& planes,
                              size_t full_size, at::Tensor& full, DecodeStats& stats) {
  Impl& r = *impl_;
  if (!(fps > 0)) r.fail("fps must be positive, got " + format_fps(fps));
  const auto n = static_cast<int64_t>(indices.size());
  if (planes.is_cuda() || planes.scalar_type() != at::kByte || planes.dim() != 4 ||
      planes.size(0) != n || planes.size(1) != 3 || planes.size(2) < 1 || planes.size(3) < 1 ||
      planes.stride(3) != 1 || planes.stride(1) != planes.size(2) * planes.stride(2)) {
    r.fail("the planes must be uint8 [" + std::to_string(n) +
           ", 3, H, W] in host memory, planes of rows with unit column stride");
  }
  const int64_t out_height = planes.size(2), out_width = planes.size(3);
  if (full.defined() &&
      (full.is_cuda() || full.scalar_type() != at::kByte || !full.is_contiguous() ||
       full.sizes() != at::IntArrayRef{r.height, r.width, 3} || full_size >= indices.size())) {
    r.fail("the full-size frame must be contiguous uint8 [" + std::to_string(r.height) + ", " +
           std::to_string(r.width) + ", 3] in host memory, and one of the frames asked for");
  }
  const RequestedFrames requested(indices);
  const size_t full_target =
      full.defined() ? requested.target_of(indices[full_size]) : requested.targets.size();
  const int64_t row = planes.stride(2);
  const auto channel = [&](int64_t slot, int64_t c) {
    return planes.data_ptr<uint8_t>() + slot * planes.stride(0) + c * planes.stride(1);
  };
  r.decode(
      requested.targets, fps,
      [&](size_t t, const AVFrame* decoded) {
        if (t == full_target) r.to_rgb(decoded, full.data_ptr<uint8_t>());
        const int64_t slot = requested.first_slot[t];
        r.to_planes(decoded, out_height, out_width, channel(slot, 0), channel(slot, 1),
                    channel(slot, 2), row);
      },
      stats);
  for (size_t i = 0; i < indices.size(); ++i) {
    if (const int64_t slot = requested.repeated_slot(indices, i); slot >= 0) {
      planes[static_cast<int64_t>(i)].copy_(planes[slot]);
    }
  }
}

namespace {

// A new reader, counted in `stats`: opened, on NVDEC, or asked for NVDEC and decoding on the CPU.
std::unique_ptr<VideoReader> open_reader(const std::string& path, DecodeStats& stats,
                                         const DecoderChoice& choice) {
  auto reader = std::make_unique<VideoReader>(path, choice);
  ++stats.readers_opened;
  if (reader->decoder() == Decoder::kNvdec) ++stats.nvdec_readers_opened;
  if (choice.decoder == Decoder::kNvdec && reader->decoder() != Decoder::kNvdec) {
    ++(reader->nvdec_refusal().empty() ? stats.nvdec_overflow : stats.nvdec_refused);
  }
  return reader;
}

}  // namespace

std::shared_ptr<VideoReader> ReaderCache::acquire(const std::string& path, size_t capacity,
                                                  DecodeStats& stats, const DecoderChoice& choice) {
  for (auto it = readers_.begin(); it != readers_.end(); ++it) {
    if (it->first == choice.decoder && it->second->path() == path) {
      readers_.splice(readers_.begin(), readers_, it);
      return readers_.front().second;
    }
  }
  std::shared_ptr<VideoReader> reader = open_reader(path, stats, choice);
  if (capacity == 0) return reader;
  readers_.emplace_front(choice.decoder, reader);
  while (readers_.size() > capacity) readers_.pop_back();
  return reader;
}

std::shared_ptr<VideoReader> SharedReaderPool::acquire(const std::string& path, size_t capacity,
                                                       DecodeStats& stats,
                                                       const DecoderChoice& choice) {
  std::unique_ptr<VideoReader> reader;
  // Closed once the lock is released: destroying an NVDEC decoder takes a while.
  std::unique_ptr<VideoReader> closing;
  std::unique_ptr<VideoReader> moving;  // an idle reader to move to `path` with its decoder
  {
    const std::lock_guard lock(idle_->mutex);
    idle_->capacity = capacity;
    auto& readers = idle_->readers;
    for (auto it = readers.begin(); it != readers.end(); ++it) {
      if (it->first == choice.decoder && it->second->path() == path) {
        reader = std::move(it->second);
        readers.erase(it);
        break;
      }
    }
    // Readers asked to keep their decoder across seeks (NVDEC's, unless told otherwise) may move.
    if (!reader && !choice.flush_on_seek.value_or(choice.decoder == Decoder::kCpu)) {
      // The least recently returned reader of a file in the same folder, which most likely
      // decodes as this file does, else of any folder (a sample's other cameras, often encoded
      // alike); switch_file checks.
      const std::filesystem::path folder = std::filesystem::path(path).parent_path();
      auto candidate = readers.rend();
      for (auto it = readers.rbegin(); it != readers.rend(); ++it) {
        if (it->first != choice.decoder || !it->second->keeps_decoder_across_seeks()) continue;
        if (std::filesystem::path(it->second->path()).parent_path() == folder) {
          candidate = it;
          break;
        }
        if (candidate == readers.rend()) candidate = it;
      }
      if (candidate != readers.rend()) {
        moving = std::move(candidate->second);
        readers.erase(std::next(candidate).base());
      }
    }
    if (!reader && !moving && choice.decoder == Decoder::kNvdec &&
        open_nvdec_readers() >= choice.max_nvdec_sessions) {
      for (auto it = readers.rbegin(); it != readers.rend(); ++it) {
        if (it->second->decoder() == Decoder::kNvdec) {
          closing = std::move(it->second);
          readers.erase(std::next(it).base());
          break;
        }
      }
    }
  }
  closing.reset();
  if (moving) {
    // Back to the idle readers, as the least recently returned, where it stays on its file.
    const auto keep_idle = [&] {
      const std::lock_guard lock(idle_->mutex);
      idle_->readers.emplace_back(choice.decoder, std::move(moving));
    };
    bool moved = false;
    try {
      moved = moving->switch_file(path);  // opens the file: outside the lock
    } catch (...) {
      keep_idle();
      throw;
    }
    if (moved) {
      reader = std::move(moving);
      ++stats.decoders_moved;
    } else if (choice.decoder == Decoder::kNvdec &&
               open_nvdec_readers() >= choice.max_nvdec_sessions) {
      moving.reset();  // its stream decodes otherwise, and its session goes to this file's reader
    } else {
      keep_idle();  // its stream decodes otherwise
    }
  }
  if (!reader) reader = open_reader(path, stats, choice);
  return std::shared_ptr<VideoReader>(
      reader.release(), [idle = idle_, key = choice.decoder](VideoReader* returned) {
        std::unique_ptr<VideoReader> owned(returned), dropped;  // dropped after the lock's release
        const std::lock_guard lock(idle->mutex);
        idle->readers.emplace_front(key, std::move(owned));
        if (idle->readers.size() > idle->capacity) {
          dropped = std::move(idle->readers.back().second);
          idle->readers.pop_back();
        }
      });
}

}  // namespace wam::video
