#include "common/io/ffmpeg.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/error.h>
#include <libswscale/swscale.h>
}

namespace wam::ffmpeg {

std::string error_message(int code) {
  char buffer[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, buffer, sizeof(buffer));
  return buffer;
}

void InputFormatCloser::operator()(AVFormatContext* format) const { avformat_close_input(&format); }

void OutputFormatCloser::operator()(AVFormatContext* format) const {
  if (format->pb) avio_closep(&format->pb);
  avformat_free_context(format);
}

void CodecContextFree::operator()(AVCodecContext* codec) const { avcodec_free_context(&codec); }

void FrameFree::operator()(AVFrame* frame) const { av_frame_free(&frame); }

void PacketFree::operator()(AVPacket* packet) const { av_packet_free(&packet); }

void ScalerFree::operator()(SwsContext* scaler) const { sws_freeContext(scaler); }

}  // namespace wam::ffmpeg
