#include "data/video_io.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>
}

#include "common/io/ffmpeg.h"
#include "wam/atomic_file.h"
#include "wam/error.h"

namespace wam::video {
namespace {

// The stamp: 16 data bits in two rows of 8 blocks, and below them the same bits inverted. A bit is
// read by comparing a block with its inverted twin, so a uniform brightness shift from the codec
// cancels out, and a pair that is not clearly different marks the stamp unreadable.
constexpr int kBlock = 8;
constexpr int kBitsPerRow = 8;
constexpr int kBits = 16;
constexpr int kStampWidth = kBitsPerRow * kBlock;  // 64
constexpr int kStampHeight = 4 * kBlock;           // 32: two data rows, two inverted rows
constexpr int kMinContrast = 64;                   // of 255, between a block and its twin
constexpr int64_t kMaxStampedIndex = (int64_t{1} << kBits) - 1;

void fill_block(uint8_t* rgb, int width, int block_x, int block_y, uint8_t value) {
  for (int y = 0; y < kBlock; ++y) {
    uint8_t* row = rgb + (static_cast<size_t>(block_y * kBlock + y) * width + block_x * kBlock) * 3;
    std::fill(row, row + kBlock * 3, value);
  }
}

// Mean luma-like value of the block's 4x4 centre: the edges carry most of the codec's ringing.
int block_level(const uint8_t* rgb, int width, int block_x, int block_y) {
  int sum = 0;
  for (int y = 2; y < kBlock - 2; ++y) {
    const uint8_t* row =
        rgb + (static_cast<size_t>(block_y * kBlock + y) * width + block_x * kBlock + 2) * 3;
    for (int x = 0; x < (kBlock - 4) * 3; ++x) sum += row[x];
  }
  return sum / ((kBlock - 4) * (kBlock - 4) * 3);
}

}  // namespace

struct VideoWriter::Impl {
  std::string path;
  std::unique_ptr<AtomicFile> file;  // FFmpeg writes its temporary()
  int width = 0;
  int height = 0;
  ffmpeg::OutputFormat format;
  ffmpeg::CodecContext codec;
  AVStream* stream = nullptr;  // owned by `format`
  ffmpeg::Scaler scaler;
  ffmpeg::Frame frame;
  ffmpeg::Packet packet;
  int64_t next_pts = 0;
  bool finished = false;

  ~Impl() {
    format.reset();  // closes the temporary before `file` removes it
  }

  [[noreturn]] void fail(const std::string& what, int code) const {
    throw Error("cannot write video \"" + path + "\": " + what + ": " +
                ffmpeg::error_message(code));
  }

  // Sends one frame (null flushes) and muxes every packet the encoder has ready.
  void encode(const AVFrame* input) {
    int rc = avcodec_send_frame(codec.get(), input);
    if (rc < 0) fail("encoding failed", rc);
    while (true) {
      rc = avcodec_receive_packet(codec.get(), packet.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
      if (rc < 0) fail("encoding failed", rc);
      av_packet_rescale_ts(packet.get(), codec->time_base, stream->time_base);
      packet->stream_index = stream->index;
      rc = av_interleaved_write_frame(format.get(), packet.get());
      if (rc < 0) fail("writing a packet failed", rc);
    }
  }
};

void quiet_codec_logs() {
  static const bool quieted = [] {
    av_log_set_level(AV_LOG_ERROR);
    setenv("SVT_LOG", "1", /*overwrite=*/0);  // SVT-AV1: errors only, unless the user asked
    return true;
  }();
  (void)quieted;
}

namespace {

// The FFmpeg encoder of `codec`; an error naming the file for another codec.
const char* encoder_of(const std::string& path, const std::string& codec) {
  if (codec == "av1") return "libsvtav1";
  if (codec == "h264") return "libx264";
  if (codec == "hevc") return "libx265";
  throw Error("cannot write video \"" + path + "\": unknown codec \"" + codec +
              "\" (allowed: av1, h264, hevc)");
}

// The encoder's own settings. AV1 as LeRobot encodes: libsvtav1 at `crf`, the fastest preset.
// H.264 and HEVC: no extra keyframes on scene cuts, so the spacing is exactly `gop`, and with
// B-frames, B-frames always (b-adapt=0), so that pts order really differs from dts order.
void set_encoder_options(AVCodecContext* codec, const EncodeOptions& options) {
  av_opt_set(codec->priv_data, "crf", std::to_string(options.crf).c_str(), 0);
  if (options.codec == "av1") {
    av_opt_set(codec->priv_data, "preset", "12", 0);
    return;
  }
  codec->max_b_frames = options.b_frames ? 2 : 0;
  av_opt_set(codec->priv_data, "preset", "veryfast", 0);
  std::string params = options.b_frames ? "scenecut=0:b-adapt=0" : "scenecut=0";
  if (options.codec == "hevc") params += ":log-level=error";
  av_opt_set(codec->priv_data, options.codec == "hevc" ? "x265-params" : "x264-params",
             params.c_str(), 0);
}

}  // namespace

VideoWriter::VideoWriter(const std::string& path, int width, int height,
                         const EncodeOptions& options)
    : impl_(std::make_unique<Impl>()) {
  quiet_codec_logs();
  Impl& w = *impl_;
  w.path = path;
  w.width = width;
  w.height = height;
  if (width <= 0 || height <= 0 || width % 2 != 0 || height % 2 != 0) {
    throw Error("cannot write video \"" + path +
                "\": width and height must be positive and even "
                "(yuv420p), got " +
                std::to_string(width) + "x" + std::to_string(height));
  }
  if (options.fps <= 0 || options.gop <= 0) {
    throw Error("cannot write video \"" + path + "\": fps and gop must be positive, got fps " +
                std::to_string(options.fps) + ", gop " + std::to_string(options.gop));
  }
  const char* encoder_name = encoder_of(path, options.codec);
  if (options.full_chroma && options.codec != "h264") {
    throw Error("cannot write video \"" + path + "\": full_chroma (yuv444p) needs codec h264");
  }
  const AVCodec* encoder = avcodec_find_encoder_by_name(encoder_name);
  if (!encoder) {
    throw Error("cannot write video \"" + path + "\": this FFmpeg build has no " +
                std::string(encoder_name) + " encoder");
  }

  w.file = std::make_unique<AtomicFile>(path);
  const std::string& temporary = w.file->temporary();
  // The temporary's extension says nothing, so the container is named explicitly.
  AVFormatContext* muxer = nullptr;
  int rc = avformat_alloc_output_context2(&muxer, nullptr, "mp4", temporary.c_str());
  if (rc < 0) w.fail("cannot create the mp4 muxer", rc);
  w.format.reset(muxer);

  const AVPixelFormat pixel_format = options.full_chroma ? AV_PIX_FMT_YUV444P : AV_PIX_FMT_YUV420P;
  w.codec.reset(avcodec_alloc_context3(encoder));
  if (!w.codec) w.fail("cannot allocate the encoder", AVERROR(ENOMEM));
  w.codec->width = width;
  w.codec->height = height;
  w.codec->pix_fmt = pixel_format;
  w.codec->time_base = AVRational{1, options.fps};
  w.codec->framerate = AVRational{options.fps, 1};
  w.codec->gop_size = options.gop;
  w.codec->keyint_min = options.gop;
  w.codec->flags |= AV_CODEC_FLAG_CLOSED_GOP;
  if (w.format->oformat->flags & AVFMT_GLOBALHEADER) w.codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  set_encoder_options(w.codec.get(), options);
  rc = avcodec_open2(w.codec.get(), encoder, nullptr);
  if (rc < 0) w.fail("cannot open the " + std::string(encoder_name) + " encoder", rc);

  w.stream = avformat_new_stream(w.format.get(), nullptr);
  if (!w.stream) w.fail("cannot add a video stream", AVERROR(ENOMEM));
  w.stream->time_base = w.codec->time_base;
  w.stream->avg_frame_rate = w.codec->framerate;
  rc = avcodec_parameters_from_context(w.stream->codecpar, w.codec.get());
  if (rc < 0) w.fail("cannot copy the encoder parameters", rc);

  rc = avio_open(&w.format->pb, temporary.c_str(), AVIO_FLAG_WRITE);
  if (rc < 0) w.fail("cannot open \"" + temporary + "\" for writing", rc);
  AVDictionary* muxer_options = nullptr;
  if (options.faststart) av_dict_set(&muxer_options, "movflags", "+faststart", 0);
  rc = avformat_write_header(w.format.get(), &muxer_options);
  av_dict_free(&muxer_options);
  if (rc < 0) w.fail("cannot write the mp4 header", rc);

  w.scaler.reset(sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, pixel_format,
                                SWS_BICUBIC, nullptr, nullptr, nullptr));
  w.frame.reset(av_frame_alloc());
  w.packet.reset(av_packet_alloc());
  if (!w.scaler || !w.frame || !w.packet) w.fail("cannot allocate buffers", AVERROR(ENOMEM));
  w.frame->format = pixel_format;
  w.frame->width = width;
  w.frame->height = height;
  rc = av_frame_get_buffer(w.frame.get(), 0);
  if (rc < 0) w.fail("cannot allocate a frame", rc);
}

VideoWriter::~VideoWriter() = default;

void VideoWriter::write(const uint8_t* rgb) {
  Impl& w = *impl_;
  if (w.finished) throw Error("cannot write video \"" + w.path + "\": write() after finish()");
  // The encoder may still reference the previous frame's buffers.
  int rc = av_frame_make_writable(w.frame.get());
  if (rc < 0) w.fail("cannot allocate a frame", rc);
  const uint8_t* source[1] = {rgb};
  const int source_stride[1] = {3 * w.width};
  sws_scale(w.scaler.get(), source, source_stride, 0, w.height, w.frame->data, w.frame->linesize);
  w.frame->pts = w.next_pts++;
  w.encode(w.frame.get());
}

void VideoWriter::finish() {
  Impl& w = *impl_;
  if (w.finished) return;
  w.encode(nullptr);
  int rc = av_write_trailer(w.format.get());
  if (rc < 0) w.fail("cannot write the mp4 trailer", rc);
  rc = avio_closep(&w.format->pb);
  if (rc < 0) w.fail("cannot close \"" + w.file->temporary() + "\"", rc);
  try {
    w.file->publish();
  } catch (const Error& e) {
    throw Error("cannot write video \"" + w.path + "\": " + e.what());
  }
  w.finished = true;
}

void stamp_frame_index(uint8_t* rgb, int width, int height, int64_t index) {
  if (width < kStampWidth || height < kStampHeight) {
    throw Error("cannot stamp a frame index into a " + std::to_string(width) + "x" +
                std::to_string(height) + " frame: it needs at least " +
                std::to_string(kStampWidth) + "x" + std::to_string(kStampHeight) + " pixels");
  }
  if (index < 0 || index > kMaxStampedIndex) {
    throw Error("cannot stamp frame index " + std::to_string(index) + ": the stamp holds 0.." +
                std::to_string(kMaxStampedIndex));
  }
  for (int bit = 0; bit < kBits; ++bit) {
    bool set = (index >> bit) & 1;
    int block_x = bit % kBitsPerRow;
    int block_y = bit / kBitsPerRow;
    fill_block(rgb, width, block_x, block_y, set ? 255 : 0);
    fill_block(rgb, width, block_x, block_y + 2, set ? 0 : 255);
  }
}

int64_t read_frame_index(const uint8_t* rgb, int width, int height) {
  if (width < kStampWidth || height < kStampHeight) return -1;
  int64_t index = 0;
  for (int bit = 0; bit < kBits; ++bit) {
    int block_x = bit % kBitsPerRow;
    int block_y = bit / kBitsPerRow;
    int level = block_level(rgb, width, block_x, block_y);
    int twin = block_level(rgb, width, block_x, block_y + 2);
    if (std::abs(level - twin) < kMinContrast) return -1;
    if (level > twin) index |= int64_t{1} << bit;
  }
  return index;
}

}  // namespace wam::video
