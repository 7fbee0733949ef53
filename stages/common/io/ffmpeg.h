// Small helpers over FFmpeg's C API shared by the video readers and writers: FFmpeg's own error
// text, and owners that free each kind of FFmpeg object with its matching call.
#pragma once

#include <memory>
#include <string>

struct AVCodecContext;
struct AVFormatContext;
struct AVFrame;
struct AVPacket;
struct SwsContext;

namespace wam::ffmpeg {

// FFmpeg's message for a negative return code, e.g. "No such file or directory".
std::string error_message(int code);

struct InputFormatCloser {
  void operator()(AVFormatContext* format) const;  // avformat_close_input
};
// Closes the output file (when open) and frees the muxer. A file that was never finished is left
// as written so far: its owner decides whether to remove it.
struct OutputFormatCloser {
  void operator()(AVFormatContext* format) const;
};
struct CodecContextFree {
  void operator()(AVCodecContext* codec) const;
};
struct FrameFree {
  void operator()(AVFrame* frame) const;
};
struct PacketFree {
  void operator()(AVPacket* packet) const;
};
struct ScalerFree {
  void operator()(SwsContext* scaler) const;
};

// From avformat_open_input.
using InputFormat = std::unique_ptr<AVFormatContext, InputFormatCloser>;
// From avformat_alloc_output_context2.
using OutputFormat = std::unique_ptr<AVFormatContext, OutputFormatCloser>;
using CodecContext = std::unique_ptr<AVCodecContext, CodecContextFree>;
using Frame = std::unique_ptr<AVFrame, FrameFree>;
using Packet = std::unique_ptr<AVPacket, PacketFree>;
using Scaler = std::unique_ptr<SwsContext, ScalerFree>;

}  // namespace wam::ffmpeg
