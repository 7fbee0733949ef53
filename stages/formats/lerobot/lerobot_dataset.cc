#include "formats/lerobot/lerobot_dataset.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <type_traits>

#include "formats/parquet/parquet.h"
#include "wam/atomic_file.h"
#include "wam/error.h"
#include "wam/limits.h"

namespace wam::data {
namespace fs = std::filesystem;

namespace {

// ---- JSON files -------------------------------------------------------------------------------

// Meta files are small; a bigger one is damage, not data (episodes.jsonl of 100k episodes is ~10
// MB).
constexpr uint64_t kMaxMetaFileBytes = uint64_t{256} << 20;

// The text of a meta file: a regular file of bounded size (a FIFO or device would block).
std::string read_meta_file(const std::string& path, const std::string& missing_hint) {
  if (!fs::exists(path)) throw Error(path + ": cannot open; " + missing_hint);
  std::string error;
  std::optional<std::string> text = read_regular_file(path, kMaxMetaFileBytes, error);
  if (!text) throw Error(path + ": " + error);
  return std::move(*text);
}

// JSON with bounded nesting and numbers a double holds; errors name `where` and line:col.
template <class Json = nlohmann::json>
Json parse_meta_json(const std::string& text, const std::string& where) {
  JsonTextError error;
  std::optional<nlohmann::json> checked = parse_json_text(text, error);
  if (!checked) throw Error(where + ":" + error.location + ": " + error.message);
  if constexpr (std::is_same_v<Json, nlohmann::json>) {
    return std::move(*checked);
  } else {
    return Json::parse(text);  // checked above; parsed again to keep the keys' order
  }
}

std::vector<nlohmann::json> read_jsonl_file(const std::string& path) {
  std::istringstream in(read_meta_file(path, "is this a LeRobot dataset directory?"));
  std::vector<nlohmann::json> rows;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    rows.push_back(parse_meta_json(line, path + ":" + std::to_string(line_number)));
  }
  return rows;
}

// A count or size from a meta file as int64. nlohmann's get<int64_t>() converts a float such as
// 1e61 with a cast whose result is undefined (the dataset_meta fuzzer found it); a whole float
// within range is taken, anything else is refused naming the field.
template <class Json>
int64_t whole_number(const Json& value, const std::string& where) {
  if (value.is_number_unsigned()) {
    if (value.template get<uint64_t>() <=
        static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(value.template get<uint64_t>());
    }
  } else if (value.is_number_integer()) {
    return value.template get<int64_t>();
  } else if (value.is_number_float()) {
    const double d = value.template get<double>();
    // 2^63 is exactly representable; every double below it in magnitude fits int64.
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9223372036854775808.0) {
      return static_cast<int64_t>(d);
    }
  }
  throw Error(where + " must be a whole number within 64 bits, got " + value.dump());
}

// An optional count of info.json, `fallback` when absent.
int64_t optional_count(const nlohmann::ordered_json& info, const char* name, int64_t fallback,
                       const std::string& info_path) {
  auto it = info.find(name);
  if (it == info.end()) return fallback;
  return whole_number(*it, info_path + ": field \"" + std::string(name) + "\"");
}

// A required field of a JSON object, converted; errors name the file, the field and the line.
template <class T>
T field(const nlohmann::json& object, const char* name, const std::string& where) {
  auto it = object.find(name);
  if (it == object.end()) throw Error(where + ": missing field \"" + name + "\"");
  if constexpr (std::is_same_v<T, int64_t>) {
    return whole_number(*it, where + ": field \"" + name + "\"");
  } else {
    try {
      return it->get<T>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + ": field \"" + name + "\" has the wrong type: " + e.what());
    }
  }
}

// LeRobot's key order.
nlohmann::ordered_json stats_to_json(const FeatureStats& s) {
  return {{"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"std", s.std}, {"count", {s.count}}};
}

FeatureStats stats_from_json(const nlohmann::json& j, const std::string& where) {
  FeatureStats s;
  s.min = field<std::vector<double>>(j, "min", where);
  s.max = field<std::vector<double>>(j, "max", where);
  s.mean = field<std::vector<double>>(j, "mean", where);
  s.std = field<std::vector<double>>(j, "std", where);
  // LeRobot writes count as [n]; older files as n, or not at all.
  auto count = j.find("count");
  if (count != j.end() && count->is_array() && !count->empty() && (*count)[0].is_number_integer()) {
    s.count = (*count)[0].get<int64_t>();
  }
  if (count != j.end() && count->is_number_integer()) s.count = count->get<int64_t>();
  if (s.count < 0) throw Error(where + ": count must not be negative");
  size_t dims = s.min.size();
  if (s.max.size() != dims || s.mean.size() != dims || s.std.size() != dims) {
    throw Error(where + ": min, max, mean and std have different lengths");
  }
  return s;
}

}  // namespace

// ---- paths and stats --------------------------------------------------------------------------

std::string format_path(const std::string& pattern, const PathFields& fields) {
  auto fail = [&](const std::string& what) {
    return Error("path template \"" + pattern + "\": " + what);
  };
  std::string out;
  size_t i = 0;
  while (i < pattern.size()) {
    if (pattern[i] != '{') {
      out += pattern[i++];
      continue;
    }
    const size_t close = pattern.find('}', i);
    if (close == std::string::npos) throw fail("unclosed {");
    const std::string spec = pattern.substr(i + 1, close - i - 1);
    const std::string name = spec.substr(0, spec.find(':'));
    size_t width = 0;
    if (spec.size() > name.size()) {
      const std::string format = spec.substr(name.size() + 1);  // e.g. "03d"
      // Zero-padded decimal widths only; a path component is never wider than 20 digits.
      const bool digits = format.size() >= 2 && format.size() <= 3 && format.back() == 'd' &&
                          std::all_of(format.begin(), format.end() - 1,
                                      [](char c) { return c >= '0' && c <= '9'; });
      if (!digits) throw fail("unsupported format {" + spec + "} (use e.g. {" + name + ":03d})");
      width = static_cast<size_t>(std::stoi(format.substr(0, format.size() - 1)));
      if (width > 20)
        throw fail("width " + std::to_string(width) + " in {" + spec + "} is over 20");
    }
    std::string value;
    if (name == "episode_chunk") {
      value = std::to_string(fields.episode_chunk);
    } else if (name == "episode_index") {
      value = std::to_string(fields.episode_index);
    } else if (name == "chunk_index") {
      value = std::to_string(fields.chunk_index);
    } else if (name == "file_index") {
      value = std::to_string(fields.file_index);
    } else if (name == "video_key") {
      value = fields.video_key;
    } else {
      throw fail("unknown field {" + name +
                 "} (allowed: episode_chunk, episode_index, chunk_index, file_index, video_key)");
    }
    if (value.size() < width) value.insert(0, width - value.size(), '0');
    out += value;
    i = close + 1;
  }
  return out;
}

std::string format_path(const std::string& pattern, int64_t episode_chunk, int64_t episode_index,
                        const std::string& video_key) {
  PathFields fields;
  fields.episode_chunk = episode_chunk;
  fields.episode_index = episode_index;
  fields.video_key = video_key;
  return format_path(pattern, fields);
}

namespace {

// The first non-finite value at or after flat position `from`, or the column's size.
size_t next_non_finite(const FloatColumn& column, size_t from) {
  while (from < column.values.size() && std::isfinite(column.values[from])) ++from;
  return from;
}

std::string describe_value(const std::string& key, int64_t episode_index, const FloatColumn& column,
                           size_t k) {
  const int64_t cols = std::max<int64_t>(column.cols, 1);
  return "column \"" + key + "\" of episode " + std::to_string(episode_index) + " holds " +
         std::to_string(column.values[k]) + " at row " +
         std::to_string(static_cast<int64_t>(k) / cols) + " (value " +
         std::to_string(static_cast<int64_t>(k) % cols) + ")";
}

}  // namespace

std::string describe_non_finite(const std::string& key, int64_t episode_index,
                                const FloatColumn& column) {
  const size_t k = next_non_finite(column, 0);
  return k < column.values.size() ? describe_value(key, episode_index, column, k) : std::string();
}

std::vector<NonFiniteRow> non_finite_rows(const std::string& key, int64_t episode_index,
                                          const FloatColumn& column) {
  std::vector<NonFiniteRow> rows;
  const size_t cols = static_cast<size_t>(std::max<int64_t>(column.cols, 1));
  for (size_t k = next_non_finite(column, 0); k < column.values.size();
       k = next_non_finite(column, (k / cols + 1) * cols)) {
    rows.push_back({static_cast<int64_t>(k / cols), describe_value(key, episode_index, column, k)});
  }
  return rows;
}

FeatureStats compute_stats(const FloatColumn& column) {
  FeatureStats s;
  const size_t dims = static_cast<size_t>(column.cols);
  s.count = column.rows;
  s.min.assign(dims, std::numeric_limits<double>::infinity());
  s.max.assign(dims, -std::numeric_limits<double>::infinity());
  s.mean.assign(dims, 0.0);
  s.std.assign(dims, 0.0);
  if (column.rows == 0) return s;
  for (int64_t r = 0; r < column.rows; ++r) {
    for (size_t d = 0; d < dims; ++d) {
      double v = column.at(r, d);
      s.min[d] = std::min(s.min[d], v);
      s.max[d] = std::max(s.max[d], v);
      s.mean[d] += v;
    }
  }
  for (auto& m : s.mean) m /= static_cast<double>(column.rows);
  for (int64_t r = 0; r < column.rows; ++r) {
    for (size_t d = 0; d < dims; ++d) {
      double delta = column.at(r, d) - s.mean[d];
      s.std[d] += delta * delta;
    }
  }
  for (auto& v : s.std) v = std::sqrt(v / static_cast<double>(column.rows));
  return s;
}

FeatureStats aggregate_stats(const std::vector<FeatureStats>& parts) {
  if (parts.empty()) throw Error("aggregate_stats: no stats to aggregate");
  const size_t dims = parts[0].min.size();
  FeatureStats total;
  total.min.assign(dims, std::numeric_limits<double>::infinity());
  total.max.assign(dims, -std::numeric_limits<double>::infinity());
  total.mean.assign(dims, 0.0);
  total.std.assign(dims, 0.0);
  for (const auto& p : parts) {
    if (p.min.size() != dims) {
      throw Error("aggregate_stats: episodes have different dimensions (" + std::to_string(dims) +
                  " and " + std::to_string(p.min.size()) + ")");
    }
    total.count += p.count;
    for (size_t d = 0; d < dims; ++d) {
      total.min[d] = std::min(total.min[d], p.min[d]);
      total.max[d] = std::max(total.max[d], p.max[d]);
      total.mean[d] += p.mean[d] * static_cast<double>(p.count);
    }
  }
  if (total.count == 0) return total;
  for (auto& m : total.mean) m /= static_cast<double>(total.count);
  for (const auto& p : parts) {
    for (size_t d = 0; d < dims; ++d) {
      double delta = p.mean[d] - total.mean[d];
      total.std[d] += static_cast<double>(p.count) * (p.std[d] * p.std[d] + delta * delta);
    }
  }
  for (auto& v : total.std) v = std::sqrt(v / static_cast<double>(total.count));
  return total;
}

// ---- DatasetInfo ------------------------------------------------------------------------------

const Feature* DatasetInfo::feature(const std::string& key) const {
  for (const auto& f : features) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

std::vector<std::string> DatasetInfo::video_keys() const {
  std::vector<std::string> keys;
  for (const auto& f : features) {
    if (f.dtype == "video") keys.push_back(f.key);
  }
  return keys;
}

nlohmann::ordered_json DatasetInfo::to_json() const {
  nlohmann::ordered_json j;
  j["codebase_version"] = codebase_version;
  j["robot_type"] = robot_type;
  j["total_episodes"] = total_episodes;
  j["total_frames"] = total_frames;
  j["total_tasks"] = total_tasks;
  j["total_videos"] = total_videos;
  j["total_chunks"] = total_chunks;
  j["chunks_size"] = chunks_size;
  j["fps"] = fps;
  j["splits"] = nlohmann::ordered_json::parse(splits.dump());
  j["data_path"] = data_path;
  j["video_path"] = video_path;
  nlohmann::ordered_json features_json = nlohmann::ordered_json::object();
  for (const auto& f : features) {
    nlohmann::ordered_json fj;
    fj["dtype"] = f.dtype;
    fj["shape"] = f.shape;
    fj["names"] =
        f.names.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f.names);
    if (f.dtype == "video") fj["info"] = nlohmann::ordered_json::parse(f.video_info.dump());
    features_json[f.key] = fj;
  }
  j["features"] = features_json;
  return j;
}

// ---- LeRobotDataset ---------------------------------------------------------------------------

namespace {

// More rows than any real episode has (a day at 1 kHz is 86.4M): a bigger length is damage, and
// sums of lengths stay far from overflowing.
constexpr int64_t kMaxEpisodeRows = int64_t{1} << 32;

bool is_float_dtype(const std::string& dtype) {
  return dtype == "float32" || dtype == "float64" || dtype == "float16";
}
bool is_int_dtype(const std::string& dtype) {
  return dtype == "int64" || dtype == "int32" || dtype == "int16" || dtype == "int8" ||
         dtype == "uint8" || dtype == "bool";
}

// Values per row of a feature: the product of its shape ([1] and [] are scalars).
int64_t feature_width(const Feature& feature) {
  int64_t width = 1;
  for (int64_t d : feature.shape) width *= d;
  return width;
}

// Only vectors are normalised: image features carry [3,1,1] stats LeRobot computes on frames.
bool is_vector_stats(const nlohmann::json& value) {
  return value.is_object() && value.contains("min") && value.at("min").is_array() &&
         !value.at("min").empty() && value.at("min").at(0).is_number();
}

std::vector<std::string> parquet_files_under(const fs::path& dir) {
  std::vector<std::string> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".parquet") {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The columns of one v3.0 meta/episodes file, one row per episode.
struct EpisodeColumns {
  std::vector<int64_t> episode_index, length, data_chunk, data_file, from, to;
  parquet::ListValues<std::string> tasks;
  std::map<std::string, std::vector<int64_t>> video_chunk, video_file;  // camera key -> column
  std::map<std::string, std::vector<double>> video_from;
  // Per-episode stats of vector features: feature key -> min, max, mean, std; and count.
  std::map<std::string, std::array<parquet::ColumnValues<double>, 4>> stats;
  std::map<std::string, std::vector<int64_t>> counts;
};

EpisodeColumns read_episode_columns(const parquet::ParquetFile& file, const std::string& path,
                                    const DatasetInfo& info) {
  const auto ints = [&](const std::string& name) { return file.read_ints(name).values; };
  EpisodeColumns c;
  c.episode_index = ints("episode_index");
  c.length = ints("length");
  c.data_chunk = ints("data/chunk_index");
  c.data_file = ints("data/file_index");
  c.from = ints("dataset_from_index");
  c.to = ints("dataset_to_index");
  c.tasks = file.read_string_lists("tasks");
  if (c.tasks.rows != static_cast<int64_t>(c.episode_index.size())) {
    throw Error(path + ": column \"tasks\" has " + std::to_string(c.tasks.rows) +
                " rows, column \"episode_index\" " + std::to_string(c.episode_index.size()));
  }
  for (const auto& key : info.video_keys()) {
    const std::string prefix = "videos/" + key + "/";
    if (!file.column(prefix + "chunk_index")) continue;  // reported by problems()
    c.video_chunk[key] = ints(prefix + "chunk_index");
    c.video_file[key] = ints(prefix + "file_index");
    c.video_from[key] = file.read_doubles(prefix + "from_timestamp").values;
  }
  // Per-episode stats of vector features: stats/<key>/{min,max,mean,std,count}.
  for (const Feature& f : info.features) {
    const std::string prefix = "stats/" + f.key + "/";
    const parquet::ColumnInfo* min = file.column(prefix + "min");
    if (f.dtype == "video" || !min || !min->is_list || !file.column(prefix + "count")) continue;
    auto& s = c.stats[f.key];
    const char* names[] = {"min", "max", "mean", "std"};
    for (size_t k = 0; k < 4; ++k) s[k] = file.read_doubles(prefix + names[k]);
    c.counts[f.key] = ints(prefix + "count");
  }
  return c;
}

// Row r's stats, one entry per feature with stats columns; a missing count is the episode's length.
EpisodeStats episode_stats_at(const EpisodeColumns& c, size_t r, int64_t length) {
  EpisodeStats episode_stats;
  for (const auto& [key, s] : c.stats) {
    FeatureStats fs;
    std::vector<double>* out[] = {&fs.min, &fs.max, &fs.mean, &fs.std};
    for (size_t k = 0; k < 4; ++k) {
      const int64_t width = s[k].width;
      out[k]->assign(s[k].values.begin() + static_cast<int64_t>(r) * width,
                     s[k].values.begin() + static_cast<int64_t>(r + 1) * width);
    }
    const std::vector<int64_t>& counts = c.counts.at(key);
    fs.count = counts.empty() ? length : counts[r];
    episode_stats[key] = std::move(fs);
  }
  return episode_stats;
}

// meta/tasks.parquet into `tasks` (task_index -> text).
void read_v3_tasks(const std::string& tasks_path, std::map<int64_t, std::string>& tasks) {
  const auto file = parquet::ParquetFile::open(tasks_path);
  // pandas writes the task strings as the frame's index: a column named after it, or
  // __index_level_0__ when it has no name.
  std::string text_column;
  for (const char* name : {"task", "__index_level_0__"}) {
    if (file.column(name)) text_column = name;
  }
  if (text_column.empty()) {
    throw Error(tasks_path + ": no \"task\" or \"__index_level_0__\" column with the task texts");
  }
  const auto index = file.read_ints("task_index").values;
  const auto text = file.read_strings(text_column).values;
  for (size_t k = 0; k < index.size(); ++k) tasks[index[k]] = text[k];
}

}  // namespace

LeRobotDataset LeRobotDataset::open(const std::string& root) {
  LeRobotDataset ds;
  ds.open_files_ = std::make_shared<OpenFiles>();
  ds.root_ = fs::absolute(root).lexically_normal().string();
  if (!ds.root_.empty() && ds.root_.back() == '/') ds.root_.pop_back();
  const std::string info_path = ds.root_ + "/meta/info.json";
  // nlohmann::json sorts object keys; ordered_json keeps the features in the file's order.
  const auto info = parse_meta_json<nlohmann::ordered_json>(
      read_meta_file(info_path, "is " + root + " a LeRobot dataset directory?"), info_path);
  DatasetInfo& i = ds.info_;
  auto get = [&](const char* name) -> const nlohmann::ordered_json& {
    auto it = info.find(name);
    if (it == info.end()) throw Error(info_path + ": missing field \"" + name + "\"");
    return *it;
  };
  try {
    i.codebase_version = get("codebase_version").get<std::string>();
    i.fps = get("fps").get<double>();
    i.data_path = get("data_path").get<std::string>();
    i.video_path = info.value("video_path", nlohmann::ordered_json(nullptr)).is_string()
                       ? info["video_path"].get<std::string>()
                       : std::string();
    i.chunks_size = optional_count(info, "chunks_size", 1000, info_path);
    i.robot_type = info.value("robot_type", nlohmann::ordered_json("")).is_string()
                       ? info.value("robot_type", std::string())
                       : std::string();
    i.total_episodes = optional_count(info, "total_episodes", 0, info_path);
    i.total_frames = optional_count(info, "total_frames", 0, info_path);
    i.total_tasks = optional_count(info, "total_tasks", 0, info_path);
    i.total_chunks = optional_count(info, "total_chunks", 0, info_path);
    i.total_videos = optional_count(info, "total_videos", 0, info_path);
    i.splits = nlohmann::json::parse(info.value("splits", nlohmann::ordered_json::object()).dump());
    for (const auto& [key, f] : get("features").items()) {
      Feature feature;
      feature.key = key;
      feature.dtype = f.at("dtype").get<std::string>();
      const nlohmann::ordered_json& shape = f.at("shape");
      if (!shape.is_array()) {
        throw Error(info_path + ": field \"features/" + key + "/shape\" must be an array, got " +
                    shape.dump());
      }
      for (const auto& side : shape) {
        feature.shape.push_back(
            whole_number(side, info_path + ": field \"features/" + key + "/shape\""));
      }
      if (f.contains("names") && f["names"].is_array()) {
        for (const auto& n : f["names"]) {
          if (n.is_string()) feature.names.push_back(n.get<std::string>());
        }
      }
      for (const char* info_key : {"info", "video_info"}) {
        if (f.contains(info_key)) feature.video_info = nlohmann::json::parse(f[info_key].dump());
      }
      i.features.push_back(std::move(feature));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(info_path + ": unexpected content: " + e.what());
  }
  if (!(i.fps > 0)) throw Error(info_path + ": field \"fps\" must be > 0");
  if (i.chunks_size <= 0) throw Error(info_path + ": field \"chunks_size\" must be > 0");
  for (const Feature& f : i.features) {
    if (f.dtype == "video") continue;
    for (int64_t d : f.shape) {
      if (d < 1 || d > (int64_t{1} << 20)) {
        throw Error(info_path + ": features." + f.key + ".shape has a dimension of " +
                    std::to_string(d) + " (expected 1 .. 1048576)");
      }
    }
  }
  const std::string& version = i.codebase_version;
  if (version == "v3.0") {
    ds.open_v3();
  } else if (version == "v2.0" || version == "v2.1") {
    ds.open_v2();
  } else {
    throw Error(info_path + ": codebase_version \"" + version +
                "\" is not supported (supported: v2.0, v2.1, v3.0); convert the dataset with "
                "LeRobot's conversion scripts");
  }
  // open_v2 and open_v3 refuse an episode listed twice, naming both places.
  for (size_t k = 0; k < ds.episodes_.size(); ++k) {
    ds.position_.emplace(ds.episodes_[k].episode_index, k);
  }

  const std::string stats_path = ds.stats_path();
  if (fs::exists(stats_path)) {
    const nlohmann::json stats = parse_meta_json(read_meta_file(stats_path, ""), stats_path);
    if (!stats.is_object()) throw Error(stats_path + ": expected an object of features");
    for (const auto& [key, value] : stats.items()) {
      if (is_vector_stats(value)) {
        ds.dataset_stats_[key] = stats_from_json(value, stats_path + " (" + key + ")");
      }
    }
  }
  return ds;
}

void LeRobotDataset::open_v2() {
  const std::string episodes_path = root_ + "/meta/episodes.jsonl";
  int64_t line = 0;
  std::map<int64_t, int64_t> line_of;  // episode_index -> line
  for (const auto& row : read_jsonl_file(episodes_path)) {
    std::string where = episodes_path + ":" + std::to_string(++line);
    EpisodeInfo e;
    e.episode_index = field<int64_t>(row, "episode_index", where);
    if (auto [first, added] = line_of.emplace(e.episode_index, line); !added) {
      throw Error(where + ": episode " + std::to_string(e.episode_index) +
                  " is listed twice (first at line " + std::to_string(first->second) + ")");
    }
    e.tasks = field<std::vector<std::string>>(row, "tasks", where);
    e.length = field<int64_t>(row, "length", where);
    if (e.length <= 0 || e.length > kMaxEpisodeRows) {
      throw Error(where + ": field \"length\" is " + std::to_string(e.length) + ", outside 1 .. " +
                  std::to_string(kMaxEpisodeRows));
    }
    if (e.episode_index < 0) throw Error(where + ": field \"episode_index\" must be >= 0");
    e.data_file =
        in_root(format_path(info_.data_path, e.episode_index / info_.chunks_size, e.episode_index),
                "data_path");
    episodes_.push_back(std::move(e));
  }
  if (episodes_.empty()) throw Error(episodes_path + ": no episodes");

  const std::string tasks_path = root_ + "/meta/tasks.jsonl";
  line = 0;
  for (const auto& row : read_jsonl_file(tasks_path)) {
    std::string where = tasks_path + ":" + std::to_string(++line);
    tasks_[field<int64_t>(row, "task_index", where)] = field<std::string>(row, "task", where);
  }

  const std::string stats_path = episodes_stats_path();
  if (fs::exists(stats_path)) {
    line = 0;
    for (const auto& row : read_jsonl_file(stats_path)) {
      std::string where = stats_path + ":" + std::to_string(++line);
      EpisodeStats stats;
      const auto stats_json = field<nlohmann::json>(row, "stats", where);
      for (const auto& [key, value] : stats_json.items()) {
        if (is_vector_stats(value)) {
          stats[key] = stats_from_json(value, where + " (stats." + key + ")");
        }
      }
      episode_stats_[field<int64_t>(row, "episode_index", where)] = std::move(stats);
    }
  }
}

void LeRobotDataset::open_v3() {
  const fs::path meta = fs::path(root_) / "meta";
  const std::vector<std::string> episode_files = parquet_files_under(meta / "episodes");
  if (episode_files.empty()) {
    throw Error((meta / "episodes").string() +
                ": no parquet files; a v3.0 dataset keeps its episode metadata in "
                "meta/episodes/chunk-XXX/file-XXX.parquet");
  }
  // Rows of a data file are numbered by the global `index`: a file's first row is the smallest
  // dataset_from_index among its episodes.
  std::map<std::string, int64_t> file_first_index;
  std::vector<int64_t> from_index;
  std::map<int64_t, std::string> listed_at;  // episode_index -> "<file> (row r)"
  for (const std::string& path : episode_files) {
    const EpisodeColumns c = read_episode_columns(parquet::ParquetFile::open(path), path, info_);
    const auto& from = c.from;
    const auto& to = c.to;
    for (size_t r = 0; r < c.episode_index.size(); ++r) {
      const std::string where = path + " (row " + std::to_string(r) + ")";
      EpisodeInfo e;
      e.episode_index = c.episode_index[r];
      if (auto [first, added] = listed_at.emplace(e.episode_index, where); !added) {
        throw Error(where + ": episode " + std::to_string(e.episode_index) +
                    " is listed twice (first at " + first->second + ")");
      }
      e.length = c.length[r];
      e.tasks.assign(c.tasks.values.begin() + c.tasks.offsets[r],
                     c.tasks.values.begin() + c.tasks.offsets[r + 1]);
      if (e.length <= 0 || e.length > kMaxEpisodeRows) {
        throw Error(where + ": length " + std::to_string(e.length) + " is outside 1 .. " +
                    std::to_string(kMaxEpisodeRows));
      }
      if (from[r] < 0 || to[r] < from[r] || to[r] - from[r] != e.length) {
        throw Error(where + ": dataset_to_index - dataset_from_index is " +
                    std::to_string(to[r] - from[r]) + " but length is " + std::to_string(e.length));
      }
      PathFields data_fields;
      data_fields.chunk_index = c.data_chunk[r];
      data_fields.file_index = c.data_file[r];
      e.data_file = in_root(format_path(info_.data_path, data_fields), "data_path");
      auto [first, inserted] = file_first_index.emplace(e.data_file, from[r]);
      if (!inserted) first->second = std::min(first->second, from[r]);
      from_index.push_back(from[r]);
      for (const auto& [key, chunks] : c.video_chunk) {
        PathFields fields;
        fields.chunk_index = chunks[r];
        fields.file_index = c.video_file.at(key)[r];
        fields.video_key = key;
        e.videos[key] = {in_root(format_path(info_.video_path, fields), "video_path"),
                         c.video_from.at(key)[r]};
      }
      EpisodeStats episode_stats = episode_stats_at(c, r, e.length);
      if (!episode_stats.empty()) episode_stats_[e.episode_index] = std::move(episode_stats);
      episodes_.push_back(std::move(e));
    }
  }
  if (episodes_.empty()) throw Error((meta / "episodes").string() + ": no episodes");
  for (size_t k = 0; k < episodes_.size(); ++k) {
    episodes_[k].first_row = from_index[k] - file_first_index.at(episodes_[k].data_file);
  }
  std::sort(episodes_.begin(), episodes_.end(), [](const EpisodeInfo& a, const EpisodeInfo& b) {
    return a.episode_index < b.episode_index;
  });
  read_v3_tasks((meta / "tasks.parquet").string(), tasks_);
}

bool LeRobotDataset::is_v3() const { return info_.codebase_version == "v3.0"; }

std::string LeRobotDataset::in_root(const std::string& relative, const char* key) const {
  const fs::path normal = fs::path(relative).lexically_normal();
  if (relative.empty() || normal.is_absolute() || normal.empty() || *normal.begin() == "..") {
    throw Error(root_ + "/meta/info.json: \"" + key + "\" gives \"" + relative +
                "\", which leaves the dataset root " + root_ +
                "; a dataset's files lie inside its directory");
  }
  return root_ + "/" + relative;
}

// The last few data files read, shared by copies of the dataset and by threads.
struct LeRobotDataset::OpenFiles {
  static constexpr size_t kKept = 8;
  std::mutex mutex;
  std::list<std::pair<std::string, std::shared_ptr<const parquet::ParquetFile>>> files;

  std::shared_ptr<const parquet::ParquetFile> open(const std::string& path) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto it = files.begin(); it != files.end(); ++it) {
        if (it->first == path) {
          files.splice(files.begin(), files, it);
          return files.front().second;
        }
      }
    }
    auto file = std::make_shared<const parquet::ParquetFile>(parquet::ParquetFile::open(path));
    std::lock_guard<std::mutex> lock(mutex);
    files.emplace_front(path, file);
    if (files.size() > kKept) files.pop_back();
    return file;
  }
};

const EpisodeInfo& LeRobotDataset::episode(int64_t episode_index) const {
  auto it = position_.find(episode_index);
  if (it == position_.end()) {
    throw Error(root_ + ": no episode " + std::to_string(episode_index) + " in " +
                (is_v3() ? "meta/episodes/" : "meta/episodes.jsonl"));
  }
  return episodes_[it->second];
}

std::string LeRobotDataset::episodes_stats_path() const {
  return root_ + "/meta/episodes_stats.jsonl";
}

std::string LeRobotDataset::stats_path() const { return root_ + "/meta/stats.json"; }

FeatureStats LeRobotDataset::feature_stats(const std::string& key) const {
  const Feature* feature = info_.feature(key);
  const size_t width = feature ? static_cast<size_t>(feature_width(*feature)) : 0;
  auto check_width = [&](const FeatureStats& s, const std::string& source) {
    if (feature && s.min.size() != width) {
      throw Error(source + ": stats of \"" + key + "\" have " + std::to_string(s.min.size()) +
                  " values per statistic, but meta/info.json gives it " + std::to_string(width) +
                  "; recompute them with `wam-pipeline dataset stats " + root_ + " --force`");
    }
  };
  if (has_episode_stats()) {
    const std::string source = fs::exists(episodes_stats_path())
                                   ? episodes_stats_path()
                                   : root_ + "/meta/episodes/ (stats columns)";
    std::vector<FeatureStats> parts;
    for (const EpisodeInfo& e : episodes_) {
      auto stats = episode_stats_.find(e.episode_index);
      if (stats == episode_stats_.end() || !stats->second.count(key)) {
        throw Error(source + ": no \"" + key + "\" stats for episode " +
                    std::to_string(e.episode_index) + ": run `wam-pipeline dataset stats " + root_ +
                    " --force`");
      }
      check_width(stats->second.at(key), source);
      parts.push_back(stats->second.at(key));
    }
    return aggregate_stats(parts);
  }
  auto it = dataset_stats_.find(key);
  if (it == dataset_stats_.end()) {
    throw Error(episodes_stats_path() + " and " + stats_path() + ": no \"" + key +
                "\" stats; normalisation needs them: run `wam-pipeline dataset stats " + root_ +
                "`");
  }
  check_width(it->second, stats_path());
  FeatureStats stats = it->second;
  if (stats.count == 0) stats.count = total_frames();  // v2.0's stats.json has no count
  return stats;
}

int64_t LeRobotDataset::total_frames() const {
  int64_t total = 0;
  for (const auto& e : episodes_) total += e.length;
  return total;
}

std::string LeRobotDataset::data_file(int64_t episode_index) const {
  return episode(episode_index).data_file;
}

VideoSegment LeRobotDataset::video_segment(int64_t episode_index,
                                           const std::string& video_key) const {
  const EpisodeInfo& e = episode(episode_index);
  if (is_v3()) {
    auto it = e.videos.find(video_key);
    if (it == e.videos.end()) {
      throw Error(root_ + "/meta/episodes/: no videos/" + video_key + "/* columns, so camera " +
                  video_key + " has no video files");
    }
    return it->second;
  }
  if (info_.video_path.empty()) {
    throw Error(root_ + "/meta/info.json: no \"video_path\", so camera " + video_key +
                " has no video files");
  }
  return {in_root(format_path(info_.video_path, episode_index / info_.chunks_size, episode_index,
                              video_key),
                  "video_path"),
          0.0};
}

std::string LeRobotDataset::video_file(int64_t episode_index, const std::string& video_key) const {
  return video_segment(episode_index, video_key).file;
}

EpisodeData LeRobotDataset::read_episode(int64_t episode_index) const {
  const EpisodeInfo& e = episode(episode_index);
  const std::string& path = e.data_file;
  if (!fs::exists(path)) {
    throw Error(path + ": missing episode data file (episode " + std::to_string(episode_index) +
                " is listed in " + (is_v3() ? "meta/episodes/" : "meta/episodes.jsonl") + ")");
  }
  std::shared_ptr<const parquet::ParquetFile> opened;
  if (is_v3()) {
    opened = open_files_->open(path);
  } else {
    opened = std::make_shared<const parquet::ParquetFile>(parquet::ParquetFile::open(path));
  }
  const parquet::ParquetFile& file = *opened;
  const parquet::RowRange rows{e.first_row, e.length};
  if (e.length > file.num_rows() || e.first_row > file.num_rows() - e.length) {
    throw Error(path + ": " + std::to_string(file.num_rows()) + " rows, but episode " +
                std::to_string(episode_index) + " needs rows " + std::to_string(e.first_row) +
                ".." + std::to_string(e.first_row + e.length - 1) + " (length " +
                std::to_string(e.length) + " in the episode metadata)");
  }
  // v2.x: the file is the episode; rows past the length would be dropped without a word.
  if (!is_v3() && file.num_rows() != e.length) {
    throw Error(path + ": " + std::to_string(file.num_rows()) +
                " rows, but meta/episodes.jsonl gives episode " + std::to_string(episode_index) +
                " length " + std::to_string(e.length) +
                "; fix the length there (or the file), or rows would be dropped");
  }
  // Widths of declared features are checked against meta/info.json's shape.
  auto check = [&](const std::string& key, int64_t rows_read, int64_t width, int64_t expected) {
    if (rows_read != e.length) {
      throw Error(path + ": column \"" + key + "\" has " + std::to_string(rows_read) +
                  " rows, but the episode metadata says episode " + std::to_string(episode_index) +
                  " has length " + std::to_string(e.length));
    }
    if (width != expected) {
      throw Error(path + ": column \"" + key + "\" has " + std::to_string(width) +
                  " values per row, but meta/info.json gives shape " +
                  nlohmann::json(info_.feature(key)->shape).dump());
    }
  };
  EpisodeData data;
  for (const parquet::ColumnInfo& column : file.columns()) {
    const Feature* feature = info_.feature(column.name);
    const bool numeric =
        feature && (is_float_dtype(feature->dtype) || is_int_dtype(feature->dtype));
    if (column.type == parquet::PhysicalType::kByteArray) {
      if (numeric) {
        throw Error(path + ": column \"" + column.name + "\" holds " +
                    parquet::name_of(column.type) +
                    (column.logical_type.empty() ? "" : " (" + column.logical_type + ")") +
                    " values, but meta/info.json declares it " + feature->dtype +
                    "; rewrite the column as numbers, or fix its dtype in meta/info.json");
      }
      continue;  // strings
    }
    if (feature && !numeric) continue;
    const int64_t expected_width = feature ? feature_width(*feature) : -1;
    // A declared float feature is read as floats whatever its stored number type (integers
    // convert), so that it is never dropped as an integer vector.
    if (feature ? is_float_dtype(feature->dtype)
                : column.type == parquet::PhysicalType::kFloat ||
                      column.type == parquet::PhysicalType::kDouble) {
      auto values = file.read_floats(column.name, rows);
      check(column.name, values.rows, values.width,
            expected_width < 0 ? values.width : expected_width);
      data.floats[column.name] = {values.rows, values.width, std::move(values.values)};
    } else {
      auto values = file.read_ints(column.name, rows);
      check(column.name, values.rows, values.width,
            expected_width < 0 ? values.width : expected_width);
      if (values.width != 1) continue;  // integer vectors: nothing reads them
      data.ints[column.name] = std::move(values.values);
    }
  }
  for (const Feature& f : info_.features) {
    if (!is_float_dtype(f.dtype) && !is_int_dtype(f.dtype)) continue;
    if (!data.floats.count(f.key) && !data.ints.count(f.key) && f.key != "frame_index") {
      throw Error(path + ": no column \"" + f.key + "\", declared in meta/info.json");
    }
  }
  if (!data.ints.count("frame_index")) {
    auto& frame_index = data.ints["frame_index"];
    frame_index.resize(static_cast<size_t>(e.length));
    for (int64_t t = 0; t < e.length; ++t) frame_index[static_cast<size_t>(t)] = t;
  }
  auto episode_column = data.ints.find("episode_index");
  if (episode_column != data.ints.end()) {
    for (size_t r = 0; r < episode_column->second.size(); ++r) {
      if (episode_column->second[r] != episode_index) {
        throw Error(path + ": row " + std::to_string(e.first_row + static_cast<int64_t>(r)) +
                    " belongs to episode " + std::to_string(episode_column->second[r]) +
                    ", but the episode metadata places episode " + std::to_string(episode_index) +
                    " at rows " + std::to_string(e.first_row) + ".." +
                    std::to_string(e.first_row + e.length - 1));
      }
    }
  }
  return data;
}

std::vector<std::string> LeRobotDataset::problems() const {
  std::vector<std::string> found;
  const std::string info_path = root_ + "/meta/info.json";
  const std::string episodes_meta = is_v3() ? "meta/episodes/" : "meta/episodes.jsonl";
  if (!is_v3()) {
    const int64_t max_index = episodes_.back().episode_index;
    const int64_t chunks_needed = max_index / info_.chunks_size + 1;
    if (info_.total_chunks != chunks_needed) {
      found.push_back(info_path + ": total_chunks is " + std::to_string(info_.total_chunks) +
                      " but the episodes need " + std::to_string(chunks_needed) +
                      "; chunks are computed from episode_index / chunks_size");
    }
  }
  if (info_.total_episodes != static_cast<int64_t>(episodes_.size())) {
    found.push_back(info_path + ": total_episodes is " + std::to_string(info_.total_episodes) +
                    " but " + episodes_meta + " lists " + std::to_string(episodes_.size()));
  }
  for (const auto& [split, range] : info_.splits.items()) {
    if (!range.is_string()) continue;
    const std::string text = range.get<std::string>();
    const size_t colon = text.find(':');
    if (colon == std::string::npos) continue;
    const int64_t end = std::atoll(text.c_str() + colon + 1);
    if (end > static_cast<int64_t>(episodes_.size())) {
      found.push_back(info_path + ": splits." + split + " \"" + text + "\" goes beyond the " +
                      std::to_string(episodes_.size()) + " episodes; every episode in " +
                      episodes_meta + " is used");
    }
  }
  std::vector<std::string> float64;
  for (const Feature& f : info_.features) {
    if (f.dtype == "float64") float64.push_back(f.key);
  }
  if (!float64.empty()) {
    std::string keys;
    for (const auto& key : float64) keys += (keys.empty() ? "" : ", ") + key;
    found.push_back(info_path + ": " + keys + (float64.size() == 1 ? " is" : " are") +
                    " float64; read as float32");
  }
  if (!info_.feature("frame_index")) {
    found.push_back(info_path +
                    ": no frame_index feature; a row's frame index is its position in the "
                    "episode");
  }
  for (const auto& key : info_.video_keys()) {
    int64_t missing = 0;
    std::string first_missing;
    for (const auto& e : episodes_) {
      std::string file;
      try {
        file = video_file(e.episode_index, key);
      } catch (const Error& error) {
        file = error.what();
      }
      if (!fs::exists(file)) {
        if (missing++ == 0) first_missing = file;
      }
    }
    if (missing == static_cast<int64_t>(episodes_.size())) {
      found.push_back("camera " + key + " is declared in meta/info.json but has no video files (" +
                      first_missing + " is missing)");
    } else if (missing > 0) {
      found.push_back("camera " + key + ": " + std::to_string(missing) + " of " +
                      std::to_string(episodes_.size()) +
                      " episodes lack a video file (first: " + first_missing + ")");
    }
  }
  std::set<std::string> reported;
  for (const auto& e : episodes_) {
    if (!fs::exists(e.data_file) && reported.insert(e.data_file).second) {
      found.push_back(e.data_file + ": missing episode data file");
    }
  }
  return found;
}

std::vector<std::string> episode_column_problems(const LeRobotDataset& ds,
                                                 const EpisodeInfo& episode, bool quirks) {
  EpisodeData columns;
  try {
    columns = ds.read_episode(episode.episode_index);
  } catch (const Error& e) {
    return {e.what()};
  }
  std::vector<std::string> found;
  for (const auto& [key, column] : columns.floats) {
    if (const std::string bad = describe_non_finite(key, episode.episode_index, column);
        !bad.empty()) {
      found.push_back(episode.data_file + ": " + bad + "; training refuses it");
    }
  }
  auto timestamp = columns.floats.find("timestamp");
  if (timestamp == columns.floats.end() || timestamp->second.rows == 0) return found;
  const std::vector<float>& t = timestamp->second.values;
  const double period = 1.0 / ds.info().fps;
  const std::string where = episode.data_file + " (episode " +
                            std::to_string(episode.episode_index) + ", column timestamp)";
  if (quirks && std::abs(t[0] - period) < 0.25 * period) {
    found.push_back(where + ": starts at " + std::to_string(t[0]) +
                    " s = 1/fps, not 0; row k is matched to video frame k");
  } else if (quirks && std::abs(t[0]) >= 0.25 * period) {
    found.push_back(where + ": starts at " + std::to_string(t[0]) +
                    " s, not 0; row k is matched to video frame k");
  }
  for (size_t r = 1; r < t.size(); ++r) {
    const double gap = t[r] - t[r - 1];
    if (gap < 0) {
      found.push_back(where + ": runs backwards: " + std::to_string(t[r - 1]) + " s at row " +
                      std::to_string(r - 1) + ", " + std::to_string(t[r]) + " s at row " +
                      std::to_string(r) + "; row k is matched to video frame k");
      break;
    }
    if (std::abs(gap - period) > 0.25 * period) {
      found.push_back(where + ": irregular: " + std::to_string(gap) + " s between rows " +
                      std::to_string(r - 1) + " and " + std::to_string(r) + " (1/fps is " +
                      std::to_string(period) + " s); row k is matched to video frame k");
      break;
    }
  }
  return found;
}

std::vector<LeRobotDataset> open_datasets(const std::vector<std::string>& roots) {
  std::vector<LeRobotDataset> datasets;
  for (const auto& root : roots) datasets.push_back(LeRobotDataset::open(root));
  for (const auto& ds : datasets) {
    if (ds.info().fps != datasets.front().info().fps) {
      std::ostringstream message;
      message << "All dataset_dirs must have the same fps:";
      for (const auto& d : datasets) message << " " << d.root() << " has " << d.info().fps << ";";
      message << " resample the videos or use the directories in separate runs";
      throw Error(message.str());
    }
  }
  return datasets;
}

// ---- writing ----------------------------------------------------------------------------------

void write_episode_parquet(const std::string& path, const EpisodeData& data,
                           const DatasetInfo& info) {
  fs::create_directories(fs::path(path).parent_path());
  parquet::ParquetWriter writer(path);
  for (const auto& [name, column] : data.floats) {
    const Feature* feature = info.feature(name);
    // Vectors are float32 LISTs even with one element, as HF `datasets` writes a Sequence.
    const bool is_list =
        feature ? !(feature->shape.size() == 1 && feature->shape[0] == 1) : column.cols != 1;
    writer.add_floats(name, column.values, is_list ? column.cols : 0);
  }
  for (const auto& [name, column] : data.ints) writer.add_ints(name, column);
  writer.write();
}

void write_episodes_stats(const std::string& path, const std::map<int64_t, EpisodeStats>& stats,
                          const std::map<int64_t, StatsEntries>& kept) {
  std::string text;
  for (const auto& [episode_index, features] : stats) {
    StatsEntries entries;
    if (auto k = kept.find(episode_index); k != kept.end()) entries = k->second;
    for (const auto& [key, s] : features) entries[key] = stats_to_json(s);
    nlohmann::ordered_json row;
    row["episode_index"] = episode_index;
    row["stats"] = nlohmann::ordered_json::object();
    for (auto& [key, entry] : entries) row["stats"][key] = std::move(entry);
    text += row.dump() + "\n";
  }
  write_file_atomically(path, text);
}

void write_dataset_stats_json(const std::string& path, const std::map<int64_t, EpisodeStats>& stats,
                              const StatsEntries& kept) {
  std::map<std::string, std::vector<FeatureStats>> parts;
  for (const auto& [episode_index, features] : stats) {
    for (const auto& [key, s] : features) parts[key].push_back(s);
  }
  StatsEntries entries = kept;
  for (const auto& [key, list] : parts) entries[key] = stats_to_json(aggregate_stats(list));
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (auto& [key, entry] : entries) out[key] = std::move(entry);
  write_file_atomically(path, out.dump(4) + "\n");
}

namespace {

// What `dataset stats` does not recompute but the existing stats files have: entries of features
// info.json declares (a camera's stats, which LeRobot computes from decoded frames; a string
// feature's) that the recomputed episode has no stats for, per episode from episodes_stats.jsonl
// and pooled from stats.json, as they are (key order kept). Entries of keys info.json no longer
// declares, and of episodes the dataset no longer lists, are dropped: nothing reads them.
struct KeptStats {
  std::map<int64_t, StatsEntries> episodes;
  StatsEntries dataset;
};

KeptStats stats_not_recomputed(const LeRobotDataset& ds,
                               const std::map<int64_t, EpisodeStats>& recomputed) {
  KeptStats kept;
  const std::string episodes_path = ds.episodes_stats_path();
  if (fs::exists(episodes_path)) {
    std::istringstream in(read_meta_file(episodes_path, ""));
    std::string line;
    int64_t line_number = 0;
    while (std::getline(in, line)) {
      ++line_number;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const auto row = parse_meta_json<nlohmann::ordered_json>(
          line, episodes_path + ":" + std::to_string(line_number));
      // LeRobotDataset::open checked each row's episode_index and stats.
      const auto episode = recomputed.find(row.at("episode_index").get<int64_t>());
      if (episode == recomputed.end() || !row.at("stats").is_object()) continue;
      for (const auto& [key, entry] : row.at("stats").items()) {
        if (ds.info().feature(key) && !episode->second.count(key)) {
          kept.episodes[episode->first][key] = entry;
        }
      }
    }
  }
  std::set<std::string> recomputed_keys;
  for (const auto& [episode_index, features] : recomputed) {
    for (const auto& [key, s] : features) recomputed_keys.insert(key);
  }
  const std::string dataset_path = ds.stats_path();
  if (fs::exists(dataset_path)) {
    // LeRobotDataset::open checked that it is an object.
    const auto stats =
        parse_meta_json<nlohmann::ordered_json>(read_meta_file(dataset_path, ""), dataset_path);
    for (const auto& [key, entry] : stats.items()) {
      if (ds.info().feature(key) && !recomputed_keys.count(key)) kept.dataset[key] = entry;
    }
  }
  return kept;
}

}  // namespace

StatsResult write_dataset_stats(const std::string& dir, bool force) {
  const auto ds = LeRobotDataset::open(dir);
  StatsResult result;
  result.path = ds.episodes_stats_path();
  result.dataset_path = ds.stats_path();
  if ((fs::exists(result.path) || fs::exists(result.dataset_path)) && !force) return result;
  std::map<int64_t, EpisodeStats> stats;
  for (const auto& episode : ds.episodes()) {
    EpisodeData columns = ds.read_episode(episode.episode_index);
    for (const auto& [key, values] : columns.ints) {
      FloatColumn column{static_cast<int64_t>(values.size()), 1, {}};
      column.values.assign(values.begin(), values.end());
      columns.floats.emplace(key, std::move(column));
    }
    for (const auto& [key, column] : columns.floats) {
      if (const std::string bad = describe_non_finite(key, episode.episode_index, column);
          !bad.empty()) {
        throw Error(episode.data_file + ": " + bad +
                    "; stats need finite values: fix or drop the episode");
      }
      stats[episode.episode_index][key] = compute_stats(column);
    }
  }
  const KeptStats kept = stats_not_recomputed(ds, stats);
  write_episodes_stats(result.path, stats, kept.episodes);
  write_dataset_stats_json(result.dataset_path, stats, kept.dataset);
  result.written = true;
  result.episodes = static_cast<int64_t>(stats.size());
  return result;
}

LeRobotWriter::LeRobotWriter(std::string root, DatasetInfo info,
                             std::map<int64_t, std::string> tasks)
    : root_(std::move(root)), info_(std::move(info)), tasks_(std::move(tasks)) {
  if (v3()) {
    info_.data_path = kV3DataPath;
    info_.video_path = kV3VideoPath;
  }
}

std::string LeRobotWriter::episode_video_file(int64_t episode_index,
                                              const std::string& video_key) const {
  if (v3()) {
    PathFields fields;
    fields.video_key = video_key;
    return root_ + "/" + format_path(info_.video_path, fields);
  }
  return root_ + "/" +
         format_path(info_.video_path, episode_index / info_.chunks_size, episode_index, video_key);
}

void LeRobotWriter::write_episode(const EpisodeInfo& episode, const EpisodeData& data) {
  if (v3()) {
    for (const auto& [name, column] : data.floats) {
      FloatColumn& all = v3_rows_.floats[name];
      all.cols = column.cols;
      all.rows += column.rows;
      all.values.insert(all.values.end(), column.values.begin(), column.values.end());
    }
    for (const auto& [name, column] : data.ints) {
      auto& all = v3_rows_.ints[name];
      all.insert(all.end(), column.begin(), column.end());
    }
  } else {
    write_episode_parquet(
        root_ + "/" +
            format_path(info_.data_path, episode.episode_index / info_.chunks_size,
                        episode.episode_index),
        data, info_);
  }
  EpisodeStats stats;
  for (const auto& [name, column] : data.floats) {
    if (column.rows == episode.length) stats[name] = compute_stats(column);
  }
  stats_[episode.episode_index] = std::move(stats);
  episodes_.push_back(episode);
}

void LeRobotWriter::finish() {
  std::sort(episodes_.begin(), episodes_.end(), [](const EpisodeInfo& a, const EpisodeInfo& b) {
    return a.episode_index < b.episode_index;
  });
  info_.total_episodes = static_cast<int64_t>(episodes_.size());
  info_.total_frames = 0;
  for (const auto& e : episodes_) info_.total_frames += e.length;
  info_.total_tasks = static_cast<int64_t>(tasks_.size());
  info_.total_chunks =
      episodes_.empty() ? 0 : episodes_.back().episode_index / info_.chunks_size + 1;
  info_.total_videos = info_.total_episodes * static_cast<int64_t>(info_.video_keys().size());
  info_.splits = {{"train", "0:" + std::to_string(info_.total_episodes)}};
  if (v3()) {
    finish_v3();
  } else {
    std::string episodes_text;
    for (const auto& e : episodes_) {
      episodes_text +=
          nlohmann::json{
              {"episode_index", e.episode_index}, {"tasks", e.tasks}, {"length", e.length}}
              .dump() +
          "\n";
    }
    write_file_atomically(root_ + "/meta/episodes.jsonl", episodes_text);
    std::string tasks_text;
    for (const auto& [index, task] : tasks_) {
      tasks_text += nlohmann::json{{"task_index", index}, {"task", task}}.dump() + "\n";
    }
    write_file_atomically(root_ + "/meta/tasks.jsonl", tasks_text);
    write_episodes_stats(root_ + "/meta/episodes_stats.jsonl", stats_);
  }
  write_dataset_stats_json(root_ + "/meta/stats.json", stats_);
  // info.json last: a dataset is complete once it exists.
  write_file_atomically(root_ + "/meta/info.json", info_.to_json().dump(4) + "\n");
}

// v3.0's layout as LeRobot 0.3 writes it: episodes in chunk 0, file 0 of data and of each camera.
void LeRobotWriter::finish_v3() {
  info_.total_chunks = 1;
  write_episode_parquet(root_ + "/" + format_path(info_.data_path, PathFields{}), v3_rows_, info_);

  fs::create_directories(root_ + "/meta/episodes/chunk-000");
  parquet::ParquetWriter episodes(root_ + "/meta/episodes/chunk-000/file-000.parquet");
  std::vector<int64_t> index, length, zeros, from, to;
  std::vector<std::vector<std::string>> tasks;
  std::vector<double> from_s, to_s;
  int64_t row = 0;
  for (const auto& e : episodes_) {
    index.push_back(e.episode_index);
    length.push_back(e.length);
    tasks.push_back(e.tasks);
    zeros.push_back(0);
    from.push_back(row);
    to.push_back(row + e.length);
    from_s.push_back(static_cast<double>(row) / info_.fps);
    to_s.push_back(static_cast<double>(row + e.length) / info_.fps);
    row += e.length;
  }
  episodes.add_ints("episode_index", index);
  episodes.add_string_lists("tasks", tasks);
  episodes.add_ints("length", length);
  episodes.add_ints("data/chunk_index", zeros);
  episodes.add_ints("data/file_index", zeros);
  episodes.add_ints("dataset_from_index", from);
  episodes.add_ints("dataset_to_index", to);
  for (const auto& key : info_.video_keys()) {
    episodes.add_ints("videos/" + key + "/chunk_index", zeros);
    episodes.add_ints("videos/" + key + "/file_index", zeros);
    episodes.add_doubles("videos/" + key + "/from_timestamp", from_s);
    episodes.add_doubles("videos/" + key + "/to_timestamp", to_s);
  }
  episodes.add_ints("meta/episodes/chunk_index", zeros);
  episodes.add_ints("meta/episodes/file_index", zeros);
  std::map<std::string, std::array<std::vector<double>, 4>> stats;
  std::map<std::string, std::vector<int64_t>> counts;
  for (const auto& e : episodes_) {
    for (const auto& [key, s] : stats_.at(e.episode_index)) {
      const std::vector<double>* parts[] = {&s.min, &s.max, &s.mean, &s.std};
      for (size_t k = 0; k < 4; ++k) {
        stats[key][k].insert(stats[key][k].end(), parts[k]->begin(), parts[k]->end());
      }
      counts[key].push_back(s.count);
    }
  }
  for (const auto& [key, values] : stats) {
    const auto width = static_cast<int64_t>(values[0].size() / episodes_.size());
    const char* names[] = {"min", "max", "mean", "std"};
    for (size_t k = 0; k < 4; ++k) {
      episodes.add_doubles("stats/" + key + "/" + names[k], values[k], width);
    }
    episodes.add_ints("stats/" + key + "/count", counts[key], 1);
  }
  episodes.write();

  parquet::ParquetWriter tasks_file(root_ + "/meta/tasks.parquet");
  std::vector<std::string> texts;
  std::vector<int64_t> task_index;
  for (const auto& [i, text] : tasks_) {
    texts.push_back(text);
    task_index.push_back(i);
  }
  tasks_file.add_strings("task", texts);
  tasks_file.add_ints("task_index", task_index);
  tasks_file.write();
}

std::string instruction_prompt(const std::string& task) {
  return "A video recorded from a robot's point of view executing the following instruction: " +
         task;
}

}  // namespace wam::data
