// Video files for robot datasets: an encoder (used by `dataset synth` and tests), a frame-index
// stamp that tests read back to prove a decoder returned exactly the requested frame, and a
// decoder that fetches chosen frames (sparse) or a whole range (full) by presentation time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace wam::video {

struct EncodeOptions {
  std::string codec = "av1";  // "av1" (libsvtav1, as LeRobot), "h264" (libx264), "hevc" (libx265)
  int fps = 30;
  int gop = 2;            // keyframe interval in frames
  bool b_frames = false;  // h264 and hevc: allow B-frames (reordered pts vs dts)
  int crf = 30;
  bool faststart = false;    // the index (moov) before the frames, as streaming sites want it
  bool full_chroma = false;  // h264 only: yuv444p, chroma at full size, instead of yuv420p
};

// Writes RGB24 frames (H x W x 3, row-major) to an mp4, yuv420p (or yuv444p: full_chroma). The file
// appears atomically: frames go to a wam::AtomicFile, published by finish(). Errors (wam::Error)
// name the path and carry FFmpeg's message.
class VideoWriter {
 public:
  VideoWriter(const std::string& path, int width, int height, const EncodeOptions& options);
  ~VideoWriter();  // without finish(): removes the temporary
  VideoWriter(const VideoWriter&) = delete;
  VideoWriter& operator=(const VideoWriter&) = delete;

  void write(const uint8_t* rgb);
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// FFmpeg and SVT-AV1 print banners and per-file info to stderr; our errors carry their messages
// instead. Lowers both to errors only, once per process (idempotent).
void quiet_codec_logs();

// Paints `index` into the top-left corner of an RGB24 frame as a block pattern that survives lossy
// compression (at least 64x32 pixels needed); read_frame_index() returns it, or -1 if unreadable.
void stamp_frame_index(uint8_t* rgb, int width, int height, int64_t index);
int64_t read_frame_index(const uint8_t* rgb, int width, int height);

}  // namespace wam::video
