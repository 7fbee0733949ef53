// Synthetic robot datasets in the LeRobot layout (see lerobot_dataset.h), shaped like LIBERO or
// RoboTwin: same cameras, resolutions and action/state dims. Frames show shapes whose positions
// follow the (smooth random) actions, a different view per camera, and every frame carries its
// own index (video::stamp_frame_index) so decoder tests can prove which frame they got.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wam::data {

struct SynthCamera {
  std::string key;  // e.g. "observation.images.image"
  int height = 0;
  int width = 0;
};

struct SynthPreset {
  std::string name;
  std::string robot_type;
  std::vector<SynthCamera> cameras;
  std::vector<std::string> action_names;
  std::vector<std::string> state_names;
  int fps = 10;
  std::vector<std::string> tasks;
};

// "libero" or "robotwin"; throws wam::Error naming the allowed presets otherwise.
SynthPreset synth_preset(const std::string& name);

struct SynthProgress {
  int64_t episodes_done = 0;
  int64_t episodes_total = 0;
  int64_t frames_done = 0;
  double elapsed_s = 0;
};

struct SynthOptions {
  std::string preset = "libero";
  std::string out;
  int64_t episodes = 4;
  int64_t frames_per_episode = 64;
  int fps = 0;  // 0: the preset's
  int gop = 2;  // LeRobot encodes with a keyframe every 2 frames
  std::string codec = "av1";
  bool b_frames = false;  // h264 and hevc: B-frames, as libx264's and libx265's defaults have
  std::string codebase_version = "v2.1";  // or "v3.0": episodes share one data file and one mp4
  uint64_t seed = 0;
  int width = 0;  // > 0 with height: every camera at this size (fast tests)
  int height = 0;
  std::function<void(const SynthProgress&)> progress;  // after each episode
};

// Writes a LeRobot dataset under options.out: parquet columns, mp4s (one per episode and camera in
// v2.1, one per camera in v3.0, where each frame's stamp is its index in the file), meta files
// with per-episode stats. Throws wam::Error on bad options or I/O failures.
void synthesize_dataset(const SynthOptions& options);

}  // namespace wam::data
