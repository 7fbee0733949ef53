// What `wam-pipeline dataset inspect` computes, as a function returning what it found, for the
// command and for tests (`dataset stats` is write_dataset_stats in data/lerobot_dataset.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wam::data {

// One camera's videos among the inspected episodes.
struct CameraReport {
  std::string key;
  int64_t videos = 0;           // readable video files
  std::string codec;            // of the first readable video
  int width = 0, height = 0;    // of the first readable video
  int64_t frames = 0;           // in all readable videos
  int64_t min_keyframe_gap = 0, max_keyframe_gap = 0;  // 0: no video with two keyframes
  int64_t single_keyframe_videos = 0;
  bool unreadable = false;  // video files exist but none could be read
};

struct DatasetReport {
  std::string root;
  std::string codebase_version;
  int64_t episodes = 0;
  int64_t frames = 0;
  double fps = 0;
  int64_t tasks = 0;
  std::vector<std::pair<std::string, std::string>> vectors;  // ("action", "float32[7]"), ...
  bool has_episode_stats = false;
  std::string stats_source;        // where normalisation stats come from; empty: nowhere
  int64_t inspected_episodes = 0;  // whose videos were read
  std::vector<CameraReport> cameras;
  std::vector<std::string> problems;  // one line each, naming the file or key
};

// Reads the meta files, and the columns and the container index of the videos of `episode_limit`
// episodes evenly spaced from the first to the last (0: all), without decoding a frame.
DatasetReport inspect_dataset(const std::string& dir, int64_t episode_limit);

}  // namespace wam::data
