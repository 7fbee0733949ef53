#include "data/dataset_inspect.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include "common/io/ffmpeg.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "wam/error.h"
#include "wam/limits.h"

namespace wam::data {
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
  // FFmpeg would wait forever for a writer of a FIFO.
  if (const std::string problem = regular_file_problem(path); !problem.empty()) {
    throw Error(path + ": " + problem);
  }
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
    // The index is written before the data in a faststart mp4: a file cut short keeps it whole.
    const int64_t file_bytes = format->pb ? avio_size(format->pb) : -1;
    for (int i = 0; i < entries; ++i) {
      const AVIndexEntry* entry = avformat_index_get_entry(video, i);
      if (file_bytes >= 0 && entry->pos + entry->size > file_bytes) {
        throw Error(path + ": truncated: frame " + std::to_string(i) +
                    " of the index ends at byte " + std::to_string(entry->pos + entry->size) +
                    " but the file has " + std::to_string(file_bytes) + " bytes");
      }
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

// The dataset's shape as its meta files give it, and the problems opening it found.
DatasetReport describe_dataset(const LeRobotDataset& ds) {
  const auto& info = ds.info();
  DatasetReport report;
  report.root = ds.root();
  report.codebase_version = info.codebase_version;
  report.episodes = static_cast<int64_t>(ds.episodes().size());
  report.frames = ds.total_frames();
  report.fps = info.fps;
  report.tasks = static_cast<int64_t>(ds.tasks().size());
  for (const char* key : {"action", "observation.state"}) {
    if (const Feature* f = info.feature(key)) {
      report.vectors.emplace_back(
          std::string(key) == "action" ? "action" : "state",
          f->dtype + "[" + std::to_string(f->shape.empty() ? 0 : f->shape[0]) + "]");
    }
  }
  report.has_episode_stats = ds.has_episode_stats();
  if (std::filesystem::exists(ds.episodes_stats_path())) {
    report.stats_source = "meta/episodes_stats.jsonl (per episode)";
  } else if (ds.has_episode_stats()) {
    report.stats_source = "meta/episodes/ stats columns (per episode)";
  } else if (std::filesystem::exists(ds.stats_path())) {
    report.stats_source = "meta/stats.json (whole dataset)";
  }
  report.problems = ds.problems();
  return report;
}

// One camera's inspected videos: what they add up to, the first one (which the others must
// match) and what is wrong with each.
struct CameraScan {
  CameraReport camera;
  std::optional<VideoSummary> first;
  std::vector<std::string> problems;
};

// Adds video `v` of `episode` to the scan, checked against meta/info.json's shape, the episode's
// length and the camera's first video.
void add_video(const LeRobotDataset& ds, const std::string& key, const EpisodeInfo& episode,
               const std::string& file, const VideoSummary& v, CameraScan& scan) {
  CameraReport& camera = scan.camera;
  ++camera.videos;
  camera.frames += v.frames;
  if (v.max_gap == 0) {
    ++camera.single_keyframe_videos;
  } else {
    camera.min_keyframe_gap =
        camera.min_keyframe_gap == 0 ? v.min_gap : std::min(camera.min_keyframe_gap, v.min_gap);
    camera.max_keyframe_gap = std::max(camera.max_keyframe_gap, v.max_gap);
  }
  const Feature* feature = ds.info().feature(key);
  if (feature && feature->shape.size() == 3 &&
      (feature->shape[0] != v.height || feature->shape[1] != v.width)) {
    scan.problems.push_back(file + ": " + std::to_string(v.width) + "x" + std::to_string(v.height) +
                            ", but meta/info.json gives " + key + " shape " +
                            nlohmann::json(feature->shape).dump() + " (height, width, channels)");
  }
  // A v3.0 mp4 holds several episodes: its frame count is theirs together.
  if (!ds.is_v3() && v.frames != episode.length) {
    scan.problems.push_back(file + ": " + std::to_string(v.frames) +
                            " frames, but meta/episodes.jsonl says " +
                            std::to_string(episode.length));
  }
  if (!scan.first) {
    scan.first = v;
  } else if (v.codec != scan.first->codec || v.width != scan.first->width ||
             v.height != scan.first->height) {
    scan.problems.push_back(file + ": " + v.codec + " " + std::to_string(v.width) + "x" +
                            std::to_string(v.height) + ", but the camera's first video is " +
                            scan.first->codec + " " + std::to_string(scan.first->width) + "x" +
                            std::to_string(scan.first->height));
  }
}

// Camera `key`'s videos of the picked episodes, read without decoding; its problems, a few of
// each kind, go to `problems`.
CameraReport inspect_camera(const LeRobotDataset& ds, const std::string& key,
                            const std::vector<size_t>& picked, std::vector<std::string>& problems) {
  CameraScan scan;
  scan.camera.key = key;
  int64_t missing = 0;
  std::set<std::string> summarized;
  for (size_t i : picked) {
    const EpisodeInfo& episode = ds.episodes()[i];
    const std::string file = ds.video_file(episode.episode_index, key);
    if (!std::filesystem::exists(file)) {
      ++missing;
      continue;
    }
    if (!summarized.insert(file).second) continue;  // v3.0: episodes share an mp4
    try {
      add_video(ds, key, episode, file, summarize_video(file), scan);
    } catch (const Error& e) {
      scan.problems.push_back(e.what());
    }
  }
  CameraReport& camera = scan.camera;
  if (scan.first) {
    camera.codec = scan.first->codec;
    camera.width = scan.first->width;
    camera.height = scan.first->height;
    if (missing > 0) {
      scan.problems.push_back(key + ": " + std::to_string(missing) + " of " +
                              std::to_string(picked.size()) +
                              " inspected episodes have no video file");
    }
  } else {
    camera.unreadable = !scan.problems.empty();
  }
  // A broken dataset repeats the same fault in every episode: keep a few of each camera's.
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < std::min(scan.problems.size(), kShown); ++i) {
    problems.push_back(scan.problems[i]);
  }
  if (scan.problems.size() > kShown) {
    problems.push_back(key + ": " + std::to_string(scan.problems.size() - kShown) +
                       " more like these");
  }
  return std::move(scan.camera);
}

// A dataset's columns share their quirks: report the first episode's, and every episode's damage
// (unreadable columns, non-finite values, timestamps running backwards or irregular), the first
// few episodes' in full.
void add_column_problems(const LeRobotDataset& ds, const std::vector<size_t>& picked,
                         std::vector<std::string>& problems) {
  constexpr size_t kShownEpisodes = 5;
  size_t damaged = 0, not_shown = 0;
  for (size_t k = 0; k < picked.size(); ++k) {
    const std::vector<std::string> found =
        episode_column_problems(ds, ds.episodes()[picked[k]], k == 0);
    if (found.empty()) continue;
    if (++damaged > kShownEpisodes) {
      not_shown += found.size();
      continue;
    }
    problems.insert(problems.end(), found.begin(), found.end());
  }
  if (not_shown > 0) {
    problems.push_back(std::to_string(not_shown) + " more problems like these in " +
                       std::to_string(damaged - kShownEpisodes) + " more episodes");
  }
}

}  // namespace

DatasetReport inspect_dataset(const std::string& dir, int64_t episode_limit) {
  const auto ds = LeRobotDataset::open(dir);
  DatasetReport report = describe_dataset(ds);
  const std::vector<size_t> picked = inspected_episodes(ds.episodes().size(), episode_limit);
  report.inspected_episodes = static_cast<int64_t>(picked.size());
  for (const auto& key : ds.info().video_keys()) {
    report.cameras.push_back(inspect_camera(ds, key, picked, report.problems));
  }
  add_column_problems(ds, picked, report.problems);
  return report;
}

}  // namespace wam::data
