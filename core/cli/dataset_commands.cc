#include "cli/dataset_commands.h"

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include "data/lerobot_dataset.h"
#include "data/synth_dataset.h"
#include "wam/error.h"

namespace wam::cli {
namespace {

std::string av_message(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(code, text, sizeof(text));
  return text;
}

// What `inspect` learns from one video by reading its packets (no decoding).
struct VideoSummary {
  std::string codec;
  int width = 0, height = 0;
  int64_t packets = 0;
  std::vector<int64_t> keyframe_gaps;  // packets between consecutive keyframes
};

VideoSummary summarize_video(const std::string& path) {
  AVFormatContext* format = nullptr;
  if (int rc = avformat_open_input(&format, path.c_str(), nullptr, nullptr); rc < 0) {
    throw Error(path + ": FFmpeg cannot open the video: " + av_message(rc));
  }
  struct Closer {
    AVFormatContext** f;
    ~Closer() { avformat_close_input(f); }
  } closer{&format};
  if (int rc = avformat_find_stream_info(format, nullptr); rc < 0) {
    throw Error(path + ": FFmpeg cannot read the stream info: " + av_message(rc));
  }
  const int stream = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (stream < 0) throw Error(path + ": no video stream: " + av_message(stream));
  const AVCodecParameters* par = format->streams[stream]->codecpar;
  VideoSummary summary;
  summary.codec = avcodec_get_name(par->codec_id);
  summary.width = par->width;
  summary.height = par->height;
  AVPacket* packet = av_packet_alloc();
  int64_t last_key = -1;
  int rc = 0;
  while ((rc = av_read_frame(format, packet)) >= 0) {
    if (packet->stream_index == stream) {
      if (packet->flags & AV_PKT_FLAG_KEY) {
        if (last_key >= 0) summary.keyframe_gaps.push_back(summary.packets - last_key);
        last_key = summary.packets;
      }
      ++summary.packets;
    }
    av_packet_unref(packet);
  }
  av_packet_free(&packet);
  if (rc != AVERROR_EOF) throw Error(path + ": FFmpeg cannot read a packet: " + av_message(rc));
  return summary;
}

std::string describe_gaps(const VideoSummary& v) {
  if (v.keyframe_gaps.empty()) {
    return "one keyframe in " + std::to_string(v.packets) + " frames";
  }
  auto [lo, hi] = std::minmax_element(v.keyframe_gaps.begin(), v.keyframe_gaps.end());
  if (*lo == *hi) return "every " + std::to_string(*lo) + " frames";
  return "every " + std::to_string(*lo) + ".." + std::to_string(*hi) + " frames";
}

int run_synth(data::SynthOptions options, const std::string& size) {
  if (!size.empty()) {
    char x = 0;
    std::istringstream in(size);
    if (!(in >> options.width >> x >> options.height) || x != 'x' || options.width <= 0 ||
        options.height <= 0) {
      throw Error("dataset synth: --size must be WIDTHxHEIGHT, e.g. 128x96; got \"" + size + "\"");
    }
  }
  options.progress = [](const data::SynthProgress& p) {
    constexpr int kBarWidth = 30;
    const int filled = static_cast<int>(kBarWidth * p.episodes_done / p.episodes_total);
    std::cerr << "\r[" << std::string(filled, '#') << std::string(kBarWidth - filled, '.') << "] "
              << p.episodes_done << "/" << p.episodes_total << " episodes, " << std::fixed
              << std::setprecision(1) << (p.elapsed_s > 0 ? p.frames_done / p.elapsed_s : 0.0)
              << " frames/s" << std::flush;
    if (p.episodes_done == p.episodes_total) std::cerr << "\n";
  };
  data::synthesize_dataset(options);
  std::cout << "wrote " << options.episodes << " " << options.preset << " episodes of "
            << options.frames_per_episode << " frames to " << options.out << "\n";
  return 0;
}

int run_inspect(const std::string& dir) {
  const auto ds = data::LeRobotDataset::open(dir);
  const auto& info = ds.info();
  std::cout << "dataset   " << ds.root() << " (LeRobot " << info.codebase_version << ")\n"
            << "episodes  " << ds.episodes().size() << "\n"
            << "frames    " << ds.total_frames() << " at " << info.fps << " fps\n"
            << "tasks     " << ds.tasks().size() << "\n";
  for (const char* key : {"action", "observation.state"}) {
    if (const data::Feature* f = info.feature(key)) {
      std::cout << std::left << std::setw(10) << (std::string(key) == "action" ? "action" : "state")
                << f->dtype << "[" << (f->shape.empty() ? 0 : f->shape[0]) << "]\n";
    }
  }
  std::cout << "stats     "
            << (ds.has_episode_stats()
                    ? "meta/episodes_stats.jsonl"
                    : "missing (run: wam-pipeline dataset stats " + ds.root() + ")")
            << "\n";
  std::vector<std::string> problems = ds.problems();
  std::cout << "cameras   " << info.video_keys().size() << "\n";
  for (const auto& key : info.video_keys()) {
    const std::string file = ds.video_file(ds.episodes().front().episode_index, key);
    std::cout << "  " << key << ": ";
    if (!std::filesystem::exists(file)) {
      std::cout << "no video files\n";
      continue;
    }
    try {
      VideoSummary v = summarize_video(file);
      std::cout << v.codec << " " << v.width << "x" << v.height << ", " << v.packets
                << " frames in episode " << ds.episodes().front().episode_index << ", keyframe "
                << describe_gaps(v) << "\n";
    } catch (const Error& e) {
      std::cout << "unreadable\n";
      problems.push_back(e.what());
    }
  }
  std::cout << "problems  " << problems.size() << "\n";
  for (const auto& p : problems) std::cout << "  - " << p << "\n";
  return 0;
}

int run_stats(const std::string& dir, bool force) {
  const auto ds = data::LeRobotDataset::open(dir);
  const std::string path = ds.episodes_stats_path();
  if (std::filesystem::exists(path) && !force) {
    std::cout << path << " exists; not overwritten (pass --force to recompute)\n";
    return 0;
  }
  std::map<int64_t, data::EpisodeStats> stats;
  for (const auto& episode : ds.episodes()) {
    const data::EpisodeData columns = ds.read_episode(episode.episode_index);
    for (const char* key : {"action", "observation.state"}) {
      auto column = columns.floats.find(key);
      if (column == columns.floats.end()) {
        throw Error(ds.data_file(episode.episode_index) + ": no \"" + key + "\" column");
      }
      stats[episode.episode_index][key] = data::compute_stats(column->second);
    }
  }
  data::write_episodes_stats(path, stats);
  std::cout << "wrote " << path << " (" << stats.size() << " episodes)\n";
  return 0;
}

}  // namespace

DatasetCommands::DatasetCommands(CLI::App& app) {
  dataset_ = app.add_subcommand("dataset", "Make, inspect and complete LeRobot-layout datasets");
  dataset_->require_subcommand(1);

  synth_ = dataset_->add_subcommand(
      "synth",
      "Write a synthetic LIBERO- or RoboTwin-shaped dataset (moving shapes driven by the "
      "actions, every frame stamped with its index)");
  synth_->add_option("--preset", preset_, "Robot and cameras to imitate")
      ->required()
      ->check(CLI::IsMember({"libero", "robotwin"}));
  synth_->add_option("--episodes", episodes_, "Episodes to write")
      ->required()
      ->check(CLI::PositiveNumber);
  synth_->add_option("--out", out_, "Output directory (must not hold a dataset)")->required();
  synth_->add_option("--frames-per-episode", frames_per_episode_, "Frames in each episode")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  synth_->add_option("--fps", fps_, "Frame rate (default: the preset's: libero 10, robotwin 25)")
      ->check(CLI::PositiveNumber);
  synth_->add_option("--gop", gop_, "Keyframe interval in frames (LeRobot uses 2)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  synth_->add_option("--codec", codec_, "av1 (libsvtav1, as LeRobot) or h264 (libx264)")
      ->capture_default_str()
      ->check(CLI::IsMember({"av1", "h264"}));
  synth_->add_option("--seed", seed_, "Seed of the actions")->capture_default_str();
  synth_->add_option("--size", size_,
                     "WIDTHxHEIGHT for every camera instead of the preset's (fast tests)");

  inspect_ = dataset_->add_subcommand(
      "inspect", "Show episodes, frames, cameras, codecs, resolution, keyframe spacing, problems");
  inspect_->add_option("dir", dir_, "Dataset directory")->required();

  stats_ = dataset_->add_subcommand(
      "stats",
      "Write meta/episodes_stats.jsonl (min/max/mean/std of action and observation.state "
      "per episode) when it is missing");
  stats_->add_option("dir", dir_, "Dataset directory")->required();
  stats_->add_flag("--force", force_, "Overwrite an existing episodes_stats.jsonl");
}

bool DatasetCommands::selected() const { return dataset_->parsed(); }

int DatasetCommands::run() const {
  if (synth_->parsed()) {
    data::SynthOptions options;
    options.preset = preset_;
    options.out = out_;
    options.episodes = episodes_;
    options.frames_per_episode = frames_per_episode_;
    options.fps = fps_;
    options.gop = gop_;
    options.codec = codec_;
    options.seed = seed_;
    return run_synth(std::move(options), size_);
  }
  if (inspect_->parsed()) return run_inspect(dir_);
  return run_stats(dir_, force_);
}

}  // namespace wam::cli
