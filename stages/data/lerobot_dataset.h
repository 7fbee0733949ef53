// LeRobot v2.1 datasets on disk: meta/info.json, meta/episodes.jsonl, meta/tasks.jsonl,
// meta/episodes_stats.jsonl and videos/chunk-XXX/<camera>/episode_XXXXXX.mp4. LeRobot keeps the
// per-frame columns in parquet; Debian 12 has no parquet library, so this layout keeps the same
// columns per episode in HDF5 (data/chunk-XXX/episode_XXXXXX.h5, one dataset per column: float32
// [N, D] for vectors, float32 [N] for timestamp, int64 [N] for indices) and info.json's data_path
// says so. A parquet data_path is refused with a message saying how to convert.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace wam::data {

inline constexpr const char* kCodebaseVersion = "v2.1";
inline constexpr const char* kHdf5DataPath =
    "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.h5";
inline constexpr const char* kVideoPath =
    "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4";

// One entry of info.json's "features".
struct Feature {
  std::string key;
  std::string dtype;  // "video", "float32", "int64", ...
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  nlohmann::json video_info;  // only for dtype "video"
};

struct DatasetInfo {
  std::string codebase_version = kCodebaseVersion;
  std::string robot_type;
  double fps = 0;
  int64_t chunks_size = 1000;
  int64_t total_episodes = 0;
  int64_t total_frames = 0;
  int64_t total_tasks = 0;
  int64_t total_chunks = 0;
  int64_t total_videos = 0;
  nlohmann::json splits = nlohmann::json::object();
  std::string data_path = kHdf5DataPath;
  std::string video_path = kVideoPath;
  std::vector<Feature> features;  // in info.json order

  const Feature* feature(const std::string& key) const;
  std::vector<std::string> video_keys() const;
  nlohmann::ordered_json to_json() const;  // LeRobot's field order
};

struct EpisodeInfo {
  int64_t episode_index = 0;
  std::vector<std::string> tasks;
  int64_t length = 0;
};

// A float32 column, row-major [rows, cols] (cols = 1 for scalar columns).
struct FloatColumn {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<float> values;

  float at(int64_t row, int64_t col) const { return values[row * cols + col]; }
};

// The per-frame columns of one episode.
struct EpisodeData {
  std::map<std::string, FloatColumn> floats;  // action, observation.state, timestamp
  std::map<std::string, std::vector<int64_t>>
      ints;  // frame_index, episode_index, index, task_index
};

// Normalisation statistics of one feature, per dimension.
struct FeatureStats {
  std::vector<double> min, max, mean, std;
  int64_t count = 0;
};
using EpisodeStats = std::map<std::string, FeatureStats>;  // feature key -> stats

// Stats of a float column (rows are samples); std is the population standard deviation.
FeatureStats compute_stats(const FloatColumn& column);
// Pools per-episode stats as LeRobot's aggregate_stats does: min of mins, max of maxes, count-
// weighted mean, pooled variance sum(n_i * (std_i^2 + (mean_i - mean)^2)) / sum(n_i).
FeatureStats aggregate_stats(const std::vector<FeatureStats>& parts);

// Expands LeRobot path templates: {name} and {name:0Nd}.
std::string format_path(const std::string& pattern, int64_t episode_chunk, int64_t episode_index,
                        const std::string& video_key = {});

class LeRobotDataset {
 public:
  // Reads and checks the meta files; throws wam::Error naming the file and field. Per-frame columns
  // are read on demand by read_episode().
  static LeRobotDataset open(const std::string& root);

  const std::string& root() const { return root_; }
  const DatasetInfo& info() const { return info_; }
  const std::vector<EpisodeInfo>& episodes() const { return episodes_; }
  const std::map<int64_t, std::string>& tasks() const { return tasks_; }  // task_index -> task
  // meta/episodes_stats.jsonl by episode index; empty when the file is absent.
  const std::map<int64_t, EpisodeStats>& episode_stats() const { return episode_stats_; }
  bool has_episode_stats() const { return !episode_stats_.empty(); }
  std::string episodes_stats_path() const;

  int64_t total_frames() const;
  std::string data_file(int64_t episode_index) const;                                 // absolute
  std::string video_file(int64_t episode_index, const std::string& video_key) const;  // absolute
  EpisodeData read_episode(int64_t episode_index) const;

  // What is odd about this dataset but does not stop reading it: quirks of real data (total_chunks
  // 0, splits beyond the episode count, a declared camera without video files, a parquet
  // data_path). One line each, naming the file or key.
  std::vector<std::string> problems() const;

 private:
  std::string root_;
  DatasetInfo info_;
  std::vector<EpisodeInfo> episodes_;
  std::map<int64_t, std::string> tasks_;
  std::map<int64_t, EpisodeStats> episode_stats_;
};

// Opens several dataset directories that are used together; all must share fps.
std::vector<LeRobotDataset> open_datasets(const std::vector<std::string>& roots);

// Writes a dataset: episode HDF5 files as they come, meta files on finish(). Every file appears
// atomically (`<path>.tmp`, then rename). `info` gives fps, features and paths; totals are filled
// in by finish().
class LeRobotWriter {
 public:
  LeRobotWriter(std::string root, DatasetInfo info, std::map<int64_t, std::string> tasks);

  // Writes data/chunk-XXX/episode_XXXXXX.h5 and records the episode and its stats (every float
  // column with one row per frame).
  void write_episode(const EpisodeInfo& episode, const EpisodeData& data);
  // Writes meta/info.json, episodes.jsonl, tasks.jsonl and episodes_stats.jsonl.
  void finish();

  std::string episode_video_file(int64_t episode_index, const std::string& video_key) const;

 private:
  std::string root_;
  DatasetInfo info_;
  std::map<int64_t, std::string> tasks_;
  std::vector<EpisodeInfo> episodes_;
  std::map<int64_t, EpisodeStats> stats_;
};

void write_episode_hdf5(const std::string& path, const EpisodeData& data);
void write_episodes_stats(const std::string& path, const std::map<int64_t, EpisodeStats>& stats);

// The instruction prompt of a dataset task, as the reference words it: the EpisodeSampler writes it
// into `prompt` and the text cache is keyed by it.
std::string instruction_prompt(const std::string& task);

}  // namespace wam::data
