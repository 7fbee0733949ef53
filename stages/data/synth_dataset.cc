#include "data/synth_dataset.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>

#include "common/seeding.h"
#include "data/video_io.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "wam/error.h"

namespace wam::data {
namespace {

std::vector<std::string> numbered(const std::string& prefix, int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) names.push_back(prefix + std::to_string(i));
  return names;
}

// Smooth random actions in [-1, 1]: per dimension a sum of three sinusoids with random amplitude,
// frequency (0.5..2 cycles per episode) and phase.
FloatColumn smooth_actions(std::mt19937_64& rng, int64_t frames, int64_t dims) {
  auto uniform = [&](double lo, double hi) {
    return lo + (hi - lo) * (static_cast<double>(rng() >> 11) * 0x1.0p-53);
  };
  FloatColumn actions{frames, dims, std::vector<float>(static_cast<size_t>(frames * dims))};
  for (int64_t d = 0; d < dims; ++d) {
    double amplitude[3], frequency[3], phase[3];
    for (int k = 0; k < 3; ++k) {
      amplitude[k] = uniform(0.1, 0.4);
      frequency[k] = uniform(0.5, 2.0);
      phase[k] = uniform(0.0, 2 * M_PI);
    }
    for (int64_t t = 0; t < frames; ++t) {
      const double progress =
          static_cast<double>(t) / static_cast<double>(std::max<int64_t>(frames, 2));
      double value = 0;
      for (int k = 0; k < 3; ++k) {
        value += amplitude[k] * std::sin(2 * M_PI * frequency[k] * progress + phase[k]);
      }
      actions.values[t * dims + d] = static_cast<float>(std::clamp(value, -1.0, 1.0));
    }
  }
  return actions;
}

// The robot integrates its actions: state dim j follows action dim j % action_dims.
FloatColumn integrate_state(std::mt19937_64& rng, const FloatColumn& actions, int64_t dims) {
  FloatColumn state{actions.rows, dims,
                    std::vector<float>(static_cast<size_t>(actions.rows * dims))};
  for (int64_t j = 0; j < dims; ++j) {
    float value = static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53 - 0.5);
    for (int64_t t = 0; t < actions.rows; ++t) {
      state.values[t * dims + j] = value;
      value += 0.1f * actions.at(t, j % actions.cols);
    }
  }
  return state;
}

struct Rgb {
  uint8_t r, g, b;
};

// One camera's view of the state: a gradient background and three discs whose centres follow
// state dims chosen per camera, so every camera shows a different picture of the same motion.
void render_frame(const FloatColumn& state, int64_t t, int camera, int width, int height,
                  std::vector<uint8_t>& rgb) {
  static constexpr Rgb kColours[3] = {{230, 60, 50}, {60, 200, 90}, {250, 210, 40}};
  const int shade = 40 + 50 * camera;
  for (int y = 0; y < height; ++y) {
    const auto gradient = static_cast<uint8_t>(30 + 120 * y / height);
    uint8_t* row = rgb.data() + static_cast<size_t>(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      row[3 * x + 0] = static_cast<uint8_t>(shade);
      row[3 * x + 1] = gradient;
      row[3 * x + 2] = static_cast<uint8_t>(90 + 60 * x / width);
    }
  }
  const int64_t dims = state.cols;
  const double base_radius = std::min(width, height) * (camera == 0 ? 0.07 : 0.11);
  for (int k = 0; k < 3; ++k) {
    const double sx = state.at(t, (2 * k + 3 * camera) % dims);
    const double sy = state.at(t, (2 * k + 1 + 3 * camera) % dims);
    const double cx = width * (0.5 + 0.4 * std::tanh(sx));
    const double cy = height * (0.5 + 0.4 * std::tanh(sy));
    const double radius = base_radius * (1.0 + 0.3 * k);
    const int y0 = std::max(0, static_cast<int>(cy - radius));
    const int y1 = std::min(height - 1, static_cast<int>(cy + radius));
    const int x0 = std::max(0, static_cast<int>(cx - radius));
    const int x1 = std::min(width - 1, static_cast<int>(cx + radius));
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) {
        if ((x - cx) * (x - cx) + (y - cy) * (y - cy) > radius * radius) continue;
        uint8_t* p = rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
        p[0] = kColours[k].r;
        p[1] = kColours[k].g;
        p[2] = kColours[k].b;
      }
    }
  }
}

Feature vector_feature(const std::string& key, const std::vector<std::string>& names) {
  return {key, "float32", {static_cast<int64_t>(names.size())}, names, nullptr};
}

Feature scalar_feature(const std::string& key, const std::string& dtype) {
  return {key, dtype, {1}, {}, nullptr};
}

// Refuses options that cannot make a dataset, before anything is written.
void check_options(const SynthOptions& o) {
  if (o.out.empty()) throw Error("dataset synth: --out is required");
  if (o.episodes < 1) throw Error("dataset synth: --episodes must be >= 1");
  if (o.frames_per_episode < 1) throw Error("dataset synth: --frames-per-episode must be >= 1");
  if (o.gop < 1) throw Error("dataset synth: --gop must be >= 1");
  if (o.codec != "av1" && o.codec != "h264" && o.codec != "hevc") {
    throw Error(unknown_with_suggestion("codec", o.codec, {"av1", "h264", "hevc"}));
  }
  if (o.b_frames && o.codec == "av1") {
    throw Error("dataset synth: --b-frames needs --codec h264 or hevc (AV1 has no B-frames)");
  }
  if (o.codebase_version != "v2.1" && o.codebase_version != "v3.0") {
    throw Error(unknown_with_suggestion("codebase version", o.codebase_version, {"v2.1", "v3.0"}));
  }
  if ((o.width > 0) != (o.height > 0)) throw Error("dataset synth: give both width and height");
  if (std::filesystem::exists(o.out + "/meta/info.json")) {
    throw Error(o.out + "/meta/info.json: already a dataset; choose an empty --out directory");
  }
}

DatasetInfo dataset_info(const SynthPreset& preset, const SynthOptions& o, int fps) {
  DatasetInfo info;
  info.codebase_version = o.codebase_version;
  info.robot_type = preset.robot_type;
  info.fps = fps;
  for (const auto& camera : preset.cameras) {
    Feature f{camera.key,
              "video",
              {camera.height, camera.width, 3},
              {"height", "width", "channel"},
              nlohmann::json{{"video.height", camera.height},
                             {"video.width", camera.width},
                             {"video.codec", o.codec},
                             {"video.pix_fmt", "yuv420p"},
                             {"video.is_depth_map", false},
                             {"video.fps", fps},
                             {"video.channels", 3},
                             {"has_audio", false}}};
    info.features.push_back(std::move(f));
  }
  info.features.push_back(vector_feature("action", preset.action_names));
  info.features.push_back(vector_feature("observation.state", preset.state_names));
  info.features.push_back(scalar_feature("timestamp", "float32"));
  for (const char* key : {"frame_index", "episode_index", "index", "task_index"}) {
    info.features.push_back(scalar_feature(key, "int64"));
  }
  return info;
}

// The columns of one episode: smooth random actions, the state they integrate to, timestamps at
// `fps` and the index columns.
EpisodeData episode_columns(std::mt19937_64& rng, const SynthPreset& preset, int64_t episode,
                            int64_t task_index, int64_t frames, int fps) {
  EpisodeData data;
  data.floats["action"] =
      smooth_actions(rng, frames, static_cast<int64_t>(preset.action_names.size()));
  data.floats["observation.state"] =
      integrate_state(rng, data.floats["action"], static_cast<int64_t>(preset.state_names.size()));
  FloatColumn timestamp{frames, 1, std::vector<float>(static_cast<size_t>(frames))};
  for (int64_t t = 0; t < frames; ++t) timestamp.values[t] = static_cast<float>(t) / fps;
  data.floats["timestamp"] = std::move(timestamp);
  auto& frame_index = data.ints["frame_index"];
  auto& index = data.ints["index"];
  for (int64_t t = 0; t < frames; ++t) {
    frame_index.push_back(t);
    index.push_back(episode * frames + t);
  }
  data.ints["episode_index"].assign(static_cast<size_t>(frames), episode);
  data.ints["task_index"].assign(static_cast<size_t>(frames), task_index);
  return data;
}

}  // namespace

SynthPreset synth_preset(const std::string& name) {
  SynthPreset p;
  p.name = name;
  if (name == "libero") {
    p.robot_type = "panda";
    p.cameras = {{"observation.images.image", 512, 512},
                 {"observation.images.wrist_image", 512, 512}};
    p.action_names = {"x", "y", "z", "roll", "pitch", "yaw", "gripper"};
    p.state_names = numbered("joint_", 7);
    for (const char* ee : {"ee_x", "ee_y", "ee_z", "ee_rx", "ee_ry", "ee_rz"}) {
      p.state_names.push_back(ee);
    }
    p.state_names.push_back("gripper_left");
    p.state_names.push_back("gripper_right");
    p.fps = 10;  // the public LeRobot conversions of LIBERO
    p.tasks = {"put the black bowl on the plate", "open the top drawer of the cabinet",
               "pick up the alphabet soup and place it in the basket", "turn on the stove"};
  } else if (name == "robotwin") {
    p.robot_type = "aloha-agilex";
    p.cameras = {{"observation.images.cam_high", 480, 640},
                 {"observation.images.cam_left_wrist", 480, 640},
                 {"observation.images.cam_right_wrist", 480, 640}};
    for (const char* arm : {"left", "right"}) {
      for (auto& joint : numbered(std::string(arm) + "_joint_", 6)) p.action_names.push_back(joint);
      p.action_names.push_back(std::string(arm) + "_gripper");
    }
    p.state_names = p.action_names;
    // The reference does not record RoboTwin's fps; 25 is a plausible camera rate.
    p.fps = 25;
    p.tasks = {"place the empty cup on the coaster", "lift the pot with both arms",
               "stack the three blocks", "hand the block over to the other arm"};
  } else {
    throw Error(unknown_with_suggestion("preset", name, {"libero", "robotwin"}));
  }
  return p;
}

void synthesize_dataset(const SynthOptions& o) {
  SynthPreset preset = synth_preset(o.preset);
  check_options(o);
  if (o.width > 0) {
    for (auto& camera : preset.cameras) {
      camera.width = o.width;
      camera.height = o.height;
    }
  }
  const int fps = o.fps > 0 ? o.fps : preset.fps;

  const DatasetInfo info = dataset_info(preset, o, fps);
  std::map<int64_t, std::string> tasks;
  for (size_t i = 0; i < preset.tasks.size(); ++i) tasks[static_cast<int64_t>(i)] = preset.tasks[i];
  LeRobotWriter writer(o.out, info, tasks);

  video::EncodeOptions encode;
  encode.codec = o.codec;
  encode.fps = fps;
  encode.gop = o.gop;
  encode.b_frames = o.b_frames;

  std::vector<std::unique_ptr<video::VideoWriter>> shared_videos;  // v3.0, per camera
  if (o.codebase_version == "v3.0") shared_videos.resize(preset.cameras.size());
  int64_t file_frame = 0;  // the next frame's index in its mp4
  const auto start = std::chrono::steady_clock::now();
  const int64_t frames = o.frames_per_episode;
  int64_t frames_done = 0;
  for (int64_t episode = 0; episode < o.episodes; ++episode) {
    std::mt19937_64 rng(seeding::mix_seed(o.seed, static_cast<uint64_t>(episode)));
    const int64_t task_index = episode % static_cast<int64_t>(preset.tasks.size());
    EpisodeData data = episode_columns(rng, preset, episode, task_index, frames, fps);
    for (size_t c = 0; c < preset.cameras.size(); ++c) {
      const SynthCamera& camera = preset.cameras[c];
      const auto open_video = [&] {
        const std::string video_file = writer.episode_video_file(episode, camera.key);
        std::filesystem::create_directories(std::filesystem::path(video_file).parent_path());
        return std::make_unique<video::VideoWriter>(video_file, camera.width, camera.height,
                                                    encode);
      };
      // v3.0 appends every episode to one mp4 per camera, kept open across episodes.
      std::unique_ptr<video::VideoWriter> own;
      video::VideoWriter* video = nullptr;
      if (shared_videos.empty()) {
        own = open_video();
        video = own.get();
      } else {
        if (!shared_videos[c]) shared_videos[c] = open_video();
        video = shared_videos[c].get();
      }
      std::vector<uint8_t> rgb(static_cast<size_t>(camera.width) * camera.height * 3);
      for (int64_t t = 0; t < frames; ++t) {
        render_frame(data.floats["observation.state"], t, static_cast<int>(c), camera.width,
                     camera.height, rgb);
        video::stamp_frame_index(rgb.data(), camera.width, camera.height, file_frame + t);
        video->write(rgb.data());
      }
      if (own) own->finish();
    }
    if (!shared_videos.empty()) file_frame += frames;
    writer.write_episode({episode, {preset.tasks[task_index]}, frames}, data);
    frames_done += frames;
    if (o.progress) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      o.progress({episode + 1, o.episodes, frames_done, elapsed});
    }
  }
  for (auto& video : shared_videos) video->finish();
  writer.finish();
}

}  // namespace wam::data
