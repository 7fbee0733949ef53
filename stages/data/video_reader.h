// Decodes chosen frames of one video file by presentation time: only the keyframe runs that hold
// requested frames are decoded (sparse), or a contiguous range frame by frame (full).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace wam::video {

// Work done, reported by VideoDecode as counters.
struct DecodeStats {
  int64_t frames_decoded = 0;  // frames out of the decoder, needed or not
  int64_t seeks = 0;
  int64_t readers_opened = 0;
};

// One open file, its video stream and a single-threaded decoder (parallelism comes from the
// graph). Frame k is the frame whose pts is `stream start + k / fps`. Not thread-safe.
// Every error is a wam::Error naming the file (and FFmpeg's message where FFmpeg failed).
class VideoReader {
 public:
  explicit VideoReader(std::string path);
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  const std::string& path() const;
  int width() const;
  int height() const;

  // Writes the frames at `indices` (any order, repeats allowed) as RGB into `out`, a contiguous
  // uint8 [indices.size(), H, W, 3] tensor, in the order given. Each needed frame is decoded once.
  void read_frames(const std::vector<int64_t>& indices, double fps, at::Tensor& out,
                   DecodeStats& stats);
  at::Tensor read_frames(const std::vector<int64_t>& indices, double fps, DecodeStats& stats);

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
  // The reader of `path`, opened if it is not held; keeps the `capacity` most recently used ones
  // (0: nothing is kept, every call opens the file).
  std::shared_ptr<VideoReader> acquire(const std::string& path, size_t capacity,
                                       DecodeStats& stats);

 private:
  std::list<std::shared_ptr<VideoReader>> readers_;  // most recently used first
};

}  // namespace wam::video
