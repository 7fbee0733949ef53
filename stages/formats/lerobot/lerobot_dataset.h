// LeRobot datasets as published, read directly: meta/info.json and per-frame columns in Parquet
// (stages/parquet), videos in mp4.
// - v2.0 and v2.1: meta/episodes.jsonl, meta/tasks.jsonl, one parquet file per episode
//   (data/chunk-XXX/episode_XXXXXX.parquet) and one mp4 per episode and camera; v2.1 adds
//   meta/episodes_stats.jsonl.
// - v3.0: episode metadata (and per-episode stats) in meta/episodes/chunk-XXX/file-XXX.parquet,
//   tasks in meta/tasks.parquet, several episodes per data file (rows dataset_from_index ..
//   dataset_to_index) and per mp4 (from_timestamp .. to_timestamp of each camera).
// Real-data quirks are absorbed and reported by problems(): float64 columns are read as float32, a
// missing frame_index is the row's position, timestamps that start at 1/fps or are irregular do not
// move frames (row k is video frame k of the episode).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace wam::data {

inline constexpr const char* kCodebaseVersion = "v2.1";  // what LeRobotWriter writes
inline constexpr const char* kDataPath =
    "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet";
inline constexpr const char* kVideoPath =
    "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4";
inline constexpr const char* kV3DataPath =
    "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet";
inline constexpr const char* kV3VideoPath =
    "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4";

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
  std::string data_path = kDataPath;
  std::string video_path = kVideoPath;
  std::vector<Feature> features;  // in info.json order

  const Feature* feature(const std::string& key) const;
  std::vector<std::string> video_keys() const;
  nlohmann::ordered_json to_json() const;  // LeRobot's field order
};

// Where one camera's frames of an episode are: frame k of the episode is the frame at
// from_timestamp + k / fps of `file` (from_timestamp is 0 where each episode has its own mp4).
struct VideoSegment {
  std::string file;  // absolute
  double from_timestamp = 0;
};

struct EpisodeInfo {
  int64_t episode_index = 0;
  std::vector<std::string> tasks;
  int64_t length = 0;
  // Filled in by LeRobotDataset::open: the episode's parquet file (absolute) and its first row
  // there (0 but in v3.0, whose files hold several episodes), and v3.0's video segments by key.
  std::string data_file{};
  int64_t first_row = 0;
  std::map<std::string, VideoSegment> videos{};
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

// "column \"action\" of episode 1 holds nan at row 2 (value 3)" for the first NaN or infinite
// value of the episode's column `key` (row within the episode), or empty when every value is
// finite. What refuses such data (stats, the sampler) names the file and says why.
std::string describe_non_finite(const std::string& key, int64_t episode_index,
                                const FloatColumn& column);

// A row of a column holding a NaN or an infinity: the row within the episode, and its first such
// value described as describe_non_finite() does.
struct NonFiniteRow {
  int64_t row = 0;
  std::string description;
};
// Every row of the episode's column `key` that holds a NaN or an infinity, in row order.
std::vector<NonFiniteRow> non_finite_rows(const std::string& key, int64_t episode_index,
                                          const FloatColumn& column);

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

// Expands LeRobot path templates: {name} and {name:0Nd}, with name one of episode_chunk and
// episode_index (v2.x), chunk_index and file_index (v3.0), and video_key. Errors name the template.
struct PathFields {
  int64_t episode_chunk = 0, episode_index = 0, chunk_index = 0, file_index = 0;
  std::string video_key;
};
std::string format_path(const std::string& pattern, const PathFields& fields);
std::string format_path(const std::string& pattern, int64_t episode_chunk, int64_t episode_index,
                        const std::string& video_key = {});

class LeRobotDataset {
 public:
  // Reads and checks the meta files of a v2.0, v2.1 or v3.0 dataset; throws wam::Error naming the
  // file and field. Per-frame columns are read on demand by read_episode().
  static LeRobotDataset open(const std::string& root);

  const std::string& root() const { return root_; }
  const DatasetInfo& info() const { return info_; }
  bool is_v3() const;
  const std::vector<EpisodeInfo>& episodes() const { return episodes_; }
  const EpisodeInfo& episode(int64_t episode_index) const;                // throws when absent
  const std::map<int64_t, std::string>& tasks() const { return tasks_; }  // task_index -> task
  // Per-episode stats by episode index: meta/episodes_stats.jsonl (v2.1, or written by `dataset
  // stats`), else the stats/* columns of v3.0's episode metadata; empty when neither exists.
  const std::map<int64_t, EpisodeStats>& episode_stats() const { return episode_stats_; }
  bool has_episode_stats() const { return !episode_stats_.empty(); }
  std::string episodes_stats_path() const;
  std::string stats_path() const;  // meta/stats.json
  // The stats that normalise `key` over the whole dataset: the per-episode stats pooled, else
  // meta/stats.json (v2.0 ships only that). Throws naming the files and the command that
  // computes them when neither has `key`, or when their length is not the feature's.
  FeatureStats feature_stats(const std::string& key) const;

  int64_t total_frames() const;
  std::string data_file(int64_t episode_index) const;                                 // absolute
  std::string video_file(int64_t episode_index, const std::string& video_key) const;  // absolute
  VideoSegment video_segment(int64_t episode_index, const std::string& video_key) const;
  // The numeric columns of the episode's rows (float vectors and scalars as float32, integer and
  // bool scalars as int64), checked against the episode's length, the shapes in meta/info.json
  // (every declared numeric feature must be there) and the episode_index column. A missing
  // frame_index is filled in with 0..length-1.
  EpisodeData read_episode(int64_t episode_index) const;

  // What is odd about this dataset but does not stop reading it: quirks of real data (total_chunks
  // 0, splits beyond the episode count, a declared camera without video files, no frame_index,
  // float64 columns). One line each, naming the file or key. Reads meta files only.
  std::vector<std::string> problems() const;

 private:
  void open_v2();
  void open_v3();
  // root_ + "/" + relative, refusing a path that leaves the dataset root (the info.json `key`
  // whose template gave it is named).
  std::string in_root(const std::string& relative, const char* key) const;

  std::string root_;
  DatasetInfo info_;
  std::vector<EpisodeInfo> episodes_;
  std::map<int64_t, size_t> position_;  // episode_index -> position in episodes_
  std::map<int64_t, std::string> tasks_;
  std::map<int64_t, EpisodeStats> episode_stats_;
  EpisodeStats dataset_stats_;  // meta/stats.json (vector features only)
  // v3.0's data files hold many episodes: their footers are parsed once, not once per episode.
  struct OpenFiles;
  std::shared_ptr<OpenFiles> open_files_;
};

// What is wrong with one episode's columns, one line each naming its data file and episode: the
// columns unreadable, a NaN or infinite value in any float column, the first timestamp step that
// runs backwards or is irregular; with `quirks`, also the quirk real datasets share and reading
// absorbs (timestamps that start at 1/fps or elsewhere than 0), worth reporting once per dataset.
std::vector<std::string> episode_column_problems(const LeRobotDataset& ds,
                                                 const EpisodeInfo& episode, bool quirks);

// Opens several dataset directories that are used together; all must share fps.
std::vector<LeRobotDataset> open_datasets(const std::vector<std::string>& roots);

// Writes a LeRobot dataset, v2.1 (the default) or v3.0 (info.codebase_version "v3.0"). v2.1: one
// parquet file per episode as they come, meta files on finish(). v3.0: every episode's rows in
// data/chunk-000/file-000.parquet and every episode's frames in one mp4 per camera (the caller
// appends them in episode order), meta/episodes/chunk-000/file-000.parquet (with per-episode
// stats) and meta/tasks.parquet on finish(). Float vectors are float32 LISTs, as HF `datasets`
// writes them. Every file appears atomically (`<path>.tmp`, then rename). `info` gives fps and
// features; paths and totals are filled in.
class LeRobotWriter {
 public:
  LeRobotWriter(std::string root, DatasetInfo info, std::map<int64_t, std::string> tasks);

  // Records the episode and its stats (every column with one row per frame); v2.1 writes its
  // parquet file now.
  void write_episode(const EpisodeInfo& episode, const EpisodeData& data);
  void finish();

  // The mp4 of this episode and camera (in v3.0 the same file for every episode).
  std::string episode_video_file(int64_t episode_index, const std::string& video_key) const;

 private:
  bool v3() const { return info_.codebase_version == "v3.0"; }
  void finish_v3();

  std::string root_;
  DatasetInfo info_;
  std::map<int64_t, std::string> tasks_;
  std::vector<EpisodeInfo> episodes_;
  std::map<int64_t, EpisodeStats> stats_;
  EpisodeData v3_rows_;  // v3.0: every episode's rows, in order
};

// Writes one episode's columns as LeRobot does: float columns of a feature with a non-scalar shape
// (and action, observation.state) as float32 LISTs, other float columns as FLOAT, ints as INT64.
void write_episode_parquet(const std::string& path, const EpisodeData& data,
                           const DatasetInfo& info);
// Stats entries as a stats file has them, by feature key: {"min": ..., "max": ..., ...} with any
// shape (LeRobot's camera stats are [3, 1, 1] per statistic).
using StatsEntries = std::map<std::string, nlohmann::ordered_json>;
// meta/episodes_stats.jsonl: one line per episode of `stats`, beside the episode's `kept` entries.
void write_episodes_stats(const std::string& path, const std::map<int64_t, EpisodeStats>& stats,
                          const std::map<int64_t, StatsEntries>& kept = {});
// meta/stats.json: the per-episode stats of each feature pooled (aggregate_stats), beside `kept`.
void write_dataset_stats_json(const std::string& path, const std::map<int64_t, EpisodeStats>& stats,
                              const StatsEntries& kept = {});

struct StatsResult {
  std::string path;          // meta/episodes_stats.jsonl
  std::string dataset_path;  // meta/stats.json
  bool written = false;      // false: one of them existed and `force` was not given
  int64_t episodes = 0;
};

// `wam-pipeline dataset stats`: computes per-episode min/max/mean/std/count of every numeric
// column, as LeRobot does, and writes meta/episodes_stats.jsonl and the pooled meta/stats.json
// (atomically), unless one of them exists and `force` is false. What it does not recompute is
// kept: the existing files' entries of the other features info.json declares (cameras, whose stats
// LeRobot computes from decoded frames), per episode and pooled, unchanged. Recomputed features get
// min/max/mean/std/count only (GR00T's q01/q99 in stats.json are not recomputed, so they go rather
// than disagree with the new values). A NaN or infinite value is an error naming the episode's
// file, column and row.
StatsResult write_dataset_stats(const std::string& dir, bool force);

// The instruction prompt of a dataset task, as the reference words it: the EpisodeSampler writes it
// into `prompt` and the text cache is keyed by it.
std::string instruction_prompt(const std::string& task);

}  // namespace wam::data
