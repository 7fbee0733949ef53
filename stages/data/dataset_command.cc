// `wam-pipeline dataset synth|inspect|stats`: make, look at and complete LeRobot-layout datasets.
// Adds the `dataset` command and its subcommands to `app`; after parsing, selected() says whether
// one of them was chosen and run() executes it, returning the process exit status.
#include "cli/command.h"

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include "cli/validators.h"
#include "common/ffmpeg.h"
#include "data/lerobot_dataset.h"
#include "data/synth_dataset.h"
#include "wam/error.h"

namespace wam::cli {
namespace {

// What `inspect` learns from one video without decoding it: the container's index (mp4 keeps
// one entry per frame, with its keyframe flag), or the packets where there is no index.
struct VideoSummary {
  std::string codec;
  int width = 0, height = 0;
  int64_t frames = 0;
  int64_t min_gap = 0, max_gap = 0;  // frames between consecutive keyframes; 0: fewer than two
};

VideoSummary summarize_video(const std::string& path) {
  AVFormatContext* opened = nullptr;
  if (int rc = avformat_open_input(&opened, path.c_str(), nullptr, nullptr); rc < 0) {
    throw Error(path + ": FFmpeg cannot open the video: " + ffmpeg::error_message(rc));
  }
  const ffmpeg::InputFormat format(opened);
  int stream = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  // mp4 headers carry the codec and frame size; other containers may need frames probed.
  if (stream < 0 || format->streams[stream]->codecpar->width <= 0) {
    if (int rc = avformat_find_stream_info(format.get(), nullptr); rc < 0) {
      throw Error(path + ": FFmpeg cannot read the stream info: " + ffmpeg::error_message(rc));
    }
    stream = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  }
  if (stream < 0) throw Error(path + ": no video stream: " + ffmpeg::error_message(stream));
  AVStream* video = format->streams[stream];
  VideoSummary summary;
  summary.codec = avcodec_get_name(video->codecpar->codec_id);
  summary.width = video->codecpar->width;
  summary.height = video->codecpar->height;
  int64_t last_key = -1;
  auto count = [&](bool key) {
    if (key) {
      if (last_key >= 0) {
        const int64_t gap = summary.frames - last_key;
        summary.min_gap = summary.min_gap == 0 ? gap : std::min(summary.min_gap, gap);
        summary.max_gap = std::max(summary.max_gap, gap);
      }
      last_key = summary.frames;
    }
    ++summary.frames;
  };
  if (const int entries = avformat_index_get_entries_count(video); entries > 0) {
    for (int i = 0; i < entries; ++i) {
      const AVIndexEntry* entry = avformat_index_get_entry(video, i);
      if (!(entry->flags & AVINDEX_DISCARD_FRAME)) count(entry->flags & AVINDEX_KEYFRAME);
    }
    return summary;
  }
  const ffmpeg::Packet packet(av_packet_alloc());
  int rc = 0;
  while ((rc = av_read_frame(format.get(), packet.get())) >= 0) {
    if (packet->stream_index == stream) count(packet->flags & AV_PKT_FLAG_KEY);
    av_packet_unref(packet.get());
  }
  if (rc != AVERROR_EOF) {
    throw Error(path + ": FFmpeg cannot read a packet: " + ffmpeg::error_message(rc));
  }
  return summary;
}

// The episodes whose videos `inspect` reads: all, or `limit` of them evenly spaced from the first
// to the last.
std::vector<size_t> inspected_episodes(size_t total, int64_t limit) {
  std::vector<size_t> picked;
  if (limit <= 0 || static_cast<size_t>(limit) >= total) {
    for (size_t i = 0; i < total; ++i) picked.push_back(i);
    return picked;
  }
  for (int64_t k = 0; k < limit; ++k) {
    const size_t index =
        limit == 1 ? 0 : static_cast<size_t>(k * static_cast<int64_t>(total - 1) / (limit - 1));
    if (picked.empty() || picked.back() != index) picked.push_back(index);
  }
  return picked;
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

int run_inspect(const std::string& dir, int64_t episode_limit) {
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
  const std::vector<size_t> picked = inspected_episodes(ds.episodes().size(), episode_limit);
  std::string scope = std::to_string(picked.size()) + " episodes";
  if (picked.size() < ds.episodes().size()) {
    scope = std::to_string(picked.size()) + " of " + std::to_string(ds.episodes().size()) +
            " episodes (evenly spaced; --episodes 0 reads all)";
  }
  std::cout << "cameras   " << info.video_keys().size() << " (videos of " << scope << ")\n";
  for (const auto& key : info.video_keys()) {
    std::optional<VideoSummary> first;
    int64_t frames = 0, videos = 0, min_gap = 0, max_gap = 0, single_keyframe = 0, missing = 0;
    std::vector<std::string> camera_problems;
    for (size_t i : picked) {
      const data::EpisodeInfo& episode = ds.episodes()[i];
      const std::string file = ds.video_file(episode.episode_index, key);
      if (!std::filesystem::exists(file)) {
        ++missing;
        continue;
      }
      VideoSummary v;
      try {
        v = summarize_video(file);
      } catch (const Error& e) {
        camera_problems.push_back(e.what());
        continue;
      }
      ++videos;
      frames += v.frames;
      if (v.max_gap == 0) {
        ++single_keyframe;
      } else {
        min_gap = min_gap == 0 ? v.min_gap : std::min(min_gap, v.min_gap);
        max_gap = std::max(max_gap, v.max_gap);
      }
      if (v.frames != episode.length) {
        camera_problems.push_back(file + ": " + std::to_string(v.frames) +
                                  " frames, but meta/episodes.jsonl says " +
                                  std::to_string(episode.length));
      }
      if (!first) {
        first = v;
      } else if (v.codec != first->codec || v.width != first->width || v.height != first->height) {
        camera_problems.push_back(file + ": " + v.codec + " " + std::to_string(v.width) + "x" +
                                  std::to_string(v.height) + ", but the camera's first video is " +
                                  first->codec + " " + std::to_string(first->width) + "x" +
                                  std::to_string(first->height));
      }
    }
    std::cout << "  " << key << ": ";
    if (videos == 0) {
      std::cout << (camera_problems.empty() ? "no video files" : "unreadable") << "\n";
    } else {
      std::cout << first->codec << " " << first->width << "x" << first->height << ", " << frames
                << " frames in " << videos << (videos == 1 ? " video" : " videos")
                << ", keyframe spacing ";
      if (max_gap == 0) {
        std::cout << "none (one keyframe per video)\n";
      } else {
        std::cout << "min " << min_gap << ", max " << max_gap << " frames";
        if (single_keyframe > 0) {
          std::cout << " (" << single_keyframe << " videos have a single keyframe)";
        }
        std::cout << "\n";
      }
      if (missing > 0) {
        camera_problems.push_back(key + ": " + std::to_string(missing) + " of " +
                                  std::to_string(picked.size()) +
                                  " inspected episodes have no video file");
      }
    }
    // A broken dataset repeats the same fault in every episode: show a few of each camera's.
    constexpr size_t kShown = 5;
    for (size_t i = 0; i < std::min(camera_problems.size(), kShown); ++i) {
      problems.push_back(camera_problems[i]);
    }
    if (camera_problems.size() > kShown) {
      problems.push_back(key + ": " + std::to_string(camera_problems.size() - kShown) +
                         " more like these");
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

class DatasetCommand final : public Command {
 public:
  static constexpr std::string_view kName = "dataset";
  explicit DatasetCommand(CLI::App& app);
  bool selected() const override;
  int run() override;

 private:
  CLI::App* dataset_ = nullptr;
  CLI::App* synth_ = nullptr;
  CLI::App* inspect_ = nullptr;
  CLI::App* stats_ = nullptr;

  std::string preset_ = "libero";
  std::string out_;
  int64_t episodes_ = 4;
  int64_t frames_per_episode_ = 64;
  int fps_ = 0;
  int gop_ = 2;
  std::string codec_ = "av1";
  uint64_t seed_ = 0;
  std::string size_;  // WxH

  std::string dir_;
  bool force_ = false;
  int64_t inspect_episodes_ = 0;  // 0: all
};

DatasetCommand::DatasetCommand(CLI::App& app) {
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
      ->check(at_least(1));
  synth_->add_option("--out", out_, "Output directory (must not hold a dataset)")->required();
  synth_->add_option("--frames-per-episode", frames_per_episode_, "Frames in each episode")
      ->capture_default_str()
      ->check(at_least(1));
  synth_->add_option("--fps", fps_, "Frame rate (default: the preset's: libero 10, robotwin 25)")
      ->check(at_least(1));
  synth_->add_option("--gop", gop_, "Keyframe interval in frames (LeRobot uses 2)")
      ->capture_default_str()
      ->check(at_least(1));
  synth_->add_option("--codec", codec_, "av1 (libsvtav1, as LeRobot) or h264 (libx264)")
      ->capture_default_str()
      ->check(CLI::IsMember({"av1", "h264"}));
  synth_->add_option("--seed", seed_, "Seed of the actions")->capture_default_str();
  synth_->add_option("--size", size_,
                     "WIDTHxHEIGHT for every camera instead of the preset's (fast tests)");

  inspect_ = dataset_->add_subcommand(
      "inspect", "Show episodes, frames, cameras, codecs, resolution, keyframe spacing, problems");
  inspect_->add_option("dir", dir_, "Dataset directory")->required();
  inspect_
      ->add_option("--episodes", inspect_episodes_,
                   "Read the videos of this many episodes, evenly spaced (0: all)")
      ->capture_default_str()
      ->check(at_least(0));

  stats_ = dataset_->add_subcommand(
      "stats",
      "Write meta/episodes_stats.jsonl (min/max/mean/std of action and observation.state "
      "per episode) when it is missing");
  stats_->add_option("dir", dir_, "Dataset directory")->required();
  stats_->add_flag("--force", force_, "Overwrite an existing episodes_stats.jsonl");
}

bool DatasetCommand::selected() const { return dataset_->parsed(); }

int DatasetCommand::run() {
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
  if (inspect_->parsed()) return run_inspect(dir_, inspect_episodes_);
  return run_stats(dir_, force_);
}

WAM_REGISTER_COMMAND(DatasetCommand);

}  // namespace wam::cli
