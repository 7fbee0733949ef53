#include "data/lerobot_dataset.h"

#include "common/hdf5.h"

#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "wam/error.h"
#include "wam/metrics.h"

namespace wam::data {
namespace fs = std::filesystem;

namespace {

// ---- HDF5 -------------------------------------------------------------------------------------

using H5Handle = hdf5::Handle;
using hdf5::silence_errors;

template <class T>
T h5_check(T result, const std::string& what, const std::string& path, const std::string& dataset) {
  return hdf5::check(result, what, path, dataset);
}

void write_dataset(hid_t file, const std::string& path, const std::string& name, hid_t mem_type,
                   hid_t file_type, const std::vector<hsize_t>& dims, const void* values) {
  H5Handle space(h5_check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                          "create a dataspace", path, name),
                 H5Sclose);
  H5Handle dataset(h5_check(H5Dcreate2(file, name.c_str(), file_type, space.get(), H5P_DEFAULT,
                                       H5P_DEFAULT, H5P_DEFAULT),
                            "create the dataset", path, name),
                   H5Dclose);
  h5_check(H5Dwrite(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values),
           "write the dataset", path, name);
}

// ---- JSON files -------------------------------------------------------------------------------

std::vector<nlohmann::json> read_jsonl_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open; is this a LeRobot dataset directory?");
  std::vector<nlohmann::json> rows;
  std::string line;
  int64_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      rows.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ":" + std::to_string(line_number) + ": invalid JSON: " + e.what());
    }
  }
  return rows;
}

// A required field of a JSON object, converted; errors name the file, the field and the line.
template <class T>
T field(const nlohmann::json& object, const char* name, const std::string& where) {
  auto it = object.find(name);
  if (it == object.end()) throw Error(where + ": missing field \"" + name + "\"");
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": field \"" + name + "\" has the wrong type: " + e.what());
  }
}

nlohmann::json stats_to_json(const FeatureStats& s) {
  return {{"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"std", s.std}, {"count", {s.count}}};
}

FeatureStats stats_from_json(const nlohmann::json& j, const std::string& where) {
  FeatureStats s;
  s.min = field<std::vector<double>>(j, "min", where);
  s.max = field<std::vector<double>>(j, "max", where);
  s.mean = field<std::vector<double>>(j, "mean", where);
  s.std = field<std::vector<double>>(j, "std", where);
  auto count = j.find("count");
  if (count != j.end() && count->is_array() && !count->empty())
    s.count = (*count)[0].get<int64_t>();
  if (count != j.end() && count->is_number_integer()) s.count = count->get<int64_t>();
  size_t dims = s.min.size();
  if (s.max.size() != dims || s.mean.size() != dims || s.std.size() != dims) {
    throw Error(where + ": min, max, mean and std have different lengths");
  }
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// ---- paths and stats --------------------------------------------------------------------------

std::string format_path(const std::string& pattern, int64_t episode_chunk, int64_t episode_index,
                        const std::string& video_key) {
  std::string out;
  size_t i = 0;
  while (i < pattern.size()) {
    if (pattern[i] != '{') {
      out += pattern[i++];
      continue;
    }
    size_t close = pattern.find('}', i);
    if (close == std::string::npos) throw Error("path template \"" + pattern + "\": unclosed {");
    std::string spec = pattern.substr(i + 1, close - i - 1);
    std::string name = spec.substr(0, spec.find(':'));
    int width = 0;
    if (spec.size() > name.size()) {
      std::string format = spec.substr(name.size() + 1);  // e.g. "03d"
      if (format.size() < 2 || format.back() != 'd') {
        throw Error("path template \"" + pattern + "\": unsupported format {" + spec + "}");
      }
      width = std::stoi(format.substr(0, format.size() - 1));
    }
    std::string value;
    if (name == "episode_chunk") {
      value = std::to_string(episode_chunk);
    } else if (name == "episode_index") {
      value = std::to_string(episode_index);
    } else if (name == "video_key") {
      value = video_key;
    } else {
      throw Error("path template \"" + pattern + "\": unknown field {" + name +
                  "} (allowed: episode_chunk, episode_index, video_key)");
    }
    if (static_cast<int>(value.size()) < width) value.insert(0, width - value.size(), '0');
    out += value;
    i = close + 1;
  }
  return out;
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

LeRobotDataset LeRobotDataset::open(const std::string& root) {
  LeRobotDataset ds;
  ds.root_ = fs::absolute(root).lexically_normal().string();
  if (!ds.root_.empty() && ds.root_.back() == '/') ds.root_.pop_back();
  const std::string info_path = ds.root_ + "/meta/info.json";
  // nlohmann::json sorts object keys; ordered_json keeps the features in the file's order.
  std::ifstream info_in(info_path);
  if (!info_in)
    throw Error(info_path + ": cannot open; is " + root + " a LeRobot dataset directory?");
  nlohmann::ordered_json info;
  try {
    info = nlohmann::ordered_json::parse(info_in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(info_path + ": invalid JSON: " + e.what());
  }
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
    i.chunks_size = info.value("chunks_size", int64_t{1000});
    i.robot_type = info.value("robot_type", nlohmann::ordered_json("")).is_string()
                       ? info.value("robot_type", std::string())
                       : std::string();
    i.total_episodes = info.value("total_episodes", int64_t{0});
    i.total_frames = info.value("total_frames", int64_t{0});
    i.total_tasks = info.value("total_tasks", int64_t{0});
    i.total_chunks = info.value("total_chunks", int64_t{0});
    i.total_videos = info.value("total_videos", int64_t{0});
    i.splits = nlohmann::json::parse(info.value("splits", nlohmann::ordered_json::object()).dump());
    for (const auto& [key, f] : get("features").items()) {
      Feature feature;
      feature.key = key;
      feature.dtype = f.at("dtype").get<std::string>();
      feature.shape = f.at("shape").get<std::vector<int64_t>>();
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

  const std::string episodes_path = ds.root_ + "/meta/episodes.jsonl";
  int64_t line = 0;
  for (const auto& row : read_jsonl_file(episodes_path)) {
    std::string where = episodes_path + ":" + std::to_string(++line);
    EpisodeInfo e;
    e.episode_index = field<int64_t>(row, "episode_index", where);
    e.tasks = field<std::vector<std::string>>(row, "tasks", where);
    e.length = field<int64_t>(row, "length", where);
    if (e.length <= 0) throw Error(where + ": field \"length\" must be > 0");
    ds.episodes_.push_back(std::move(e));
  }
  if (ds.episodes_.empty()) throw Error(episodes_path + ": no episodes");

  const std::string tasks_path = ds.root_ + "/meta/tasks.jsonl";
  line = 0;
  for (const auto& row : read_jsonl_file(tasks_path)) {
    std::string where = tasks_path + ":" + std::to_string(++line);
    ds.tasks_[field<int64_t>(row, "task_index", where)] = field<std::string>(row, "task", where);
  }

  const std::string stats_path = ds.episodes_stats_path();
  if (fs::exists(stats_path)) {
    line = 0;
    for (const auto& row : read_jsonl_file(stats_path)) {
      std::string where = stats_path + ":" + std::to_string(++line);
      EpisodeStats stats;
      const auto stats_json = field<nlohmann::json>(row, "stats", where);
      for (const auto& [key, value] : stats_json.items()) {
        // Image features carry [3,1,1] stats LeRobot computes on frames; only vectors are used.
        if (value.contains("min") && value.at("min").is_array() && !value.at("min").empty() &&
            value.at("min").at(0).is_number()) {
          stats[key] = stats_from_json(value, where + " (stats." + key + ")");
        }
      }
      ds.episode_stats_[field<int64_t>(row, "episode_index", where)] = std::move(stats);
    }
  }
  return ds;
}

std::string LeRobotDataset::episodes_stats_path() const {
  return root_ + "/meta/episodes_stats.jsonl";
}

int64_t LeRobotDataset::total_frames() const {
  int64_t total = 0;
  for (const auto& e : episodes_) total += e.length;
  return total;
}

std::string LeRobotDataset::data_file(int64_t episode_index) const {
  return root_ + "/" +
         format_path(info_.data_path, episode_index / info_.chunks_size, episode_index);
}

std::string LeRobotDataset::video_file(int64_t episode_index, const std::string& video_key) const {
  if (info_.video_path.empty()) {
    throw Error(root_ + "/meta/info.json: no \"video_path\", so camera " + video_key +
                " has no video files");
  }
  return root_ + "/" +
         format_path(info_.video_path, episode_index / info_.chunks_size, episode_index, video_key);
}

EpisodeData LeRobotDataset::read_episode(int64_t episode_index) const {
  const std::string path = data_file(episode_index);
  if (ends_with(path, ".parquet")) {
    throw Error(path +
                ": per-frame columns are stored in parquet, which is not readable here (no "
                "parquet library on Debian 12); convert the dataset to the HDF5 layout: one "
                "data/chunk-XXX/episode_XXXXXX.h5 per episode with one dataset per column, and "
                "data_path \"" +
                std::string(kHdf5DataPath) + "\" in meta/info.json");
  }
  if (!ends_with(path, ".h5")) {
    throw Error(root_ + "/meta/info.json: data_path \"" + info_.data_path +
                "\" is neither HDF5 (.h5) nor parquet");
  }
  if (!fs::exists(path)) {
    throw Error(path + ": missing episode data file (episode " + std::to_string(episode_index) +
                " is listed in meta/episodes.jsonl)");
  }
  silence_errors();
  H5Handle file(
      h5_check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open the file", path, ""),
      H5Fclose);
  std::vector<std::string> names;
  h5_check(H5Literate(
               file.get(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr,
               [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
                 static_cast<std::vector<std::string>*>(data)->push_back(name);
                 return 0;
               },
               &names),
           "list the datasets", path, "");
  EpisodeData data;
  for (const auto& name : names) {
    H5Handle dataset(
        h5_check(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), "open the dataset", path, name),
        H5Dclose);
    H5Handle space(h5_check(H5Dget_space(dataset.get()), "read the dataspace", path, name),
                   H5Sclose);
    int rank = h5_check(H5Sget_simple_extent_ndims(space.get()), "read the rank", path, name);
    if (rank < 1 || rank > 2) {
      throw Error(path + " (dataset " + name + "): expected 1-D or 2-D, got rank " +
                  std::to_string(rank));
    }
    hsize_t dims[2] = {0, 1};
    h5_check(H5Sget_simple_extent_dims(space.get(), dims, nullptr), "read the shape", path, name);
    H5Handle type(h5_check(H5Dget_type(dataset.get()), "read the type", path, name), H5Tclose);
    H5T_class_t type_class = H5Tget_class(type.get());
    const auto rows = static_cast<int64_t>(dims[0]);
    if (type_class == H5T_FLOAT) {
      FloatColumn column;
      column.rows = rows;
      column.cols = rank == 2 ? static_cast<int64_t>(dims[1]) : 1;
      column.values.resize(static_cast<size_t>(column.rows * column.cols));
      h5_check(H5Dread(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                       column.values.data()),
               "read the values", path, name);
      data.floats[name] = std::move(column);
    } else if (type_class == H5T_INTEGER && rank == 1) {
      std::vector<int64_t> values(static_cast<size_t>(rows));
      h5_check(
          H5Dread(dataset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()),
          "read the values", path, name);
      data.ints[name] = std::move(values);
    } else {
      throw Error(path + " (dataset " + name +
                  "): expected float columns or 1-D integer columns, got another type");
    }
  }
  const EpisodeInfo* episode = nullptr;
  for (const auto& e : episodes_) {
    if (e.episode_index == episode_index) episode = &e;
  }
  auto check_rows = [&](const std::string& name, int64_t rows) {
    if (episode && rows != episode->length) {
      throw Error(path + " (dataset " + name + "): " + std::to_string(rows) +
                  " rows, but meta/episodes.jsonl says episode " + std::to_string(episode_index) +
                  " has length " + std::to_string(episode->length));
    }
  };
  for (const auto& [name, column] : data.floats) check_rows(name, column.rows);
  for (const auto& [name, column] : data.ints)
    check_rows(name, static_cast<int64_t>(column.size()));
  return data;
}

std::vector<std::string> LeRobotDataset::problems() const {
  std::vector<std::string> found;
  const std::string info_path = root_ + "/meta/info.json";
  const int64_t max_index = episodes_.back().episode_index;
  const int64_t chunks_needed = max_index / info_.chunks_size + 1;
  if (info_.total_chunks != chunks_needed) {
    found.push_back(info_path + ": total_chunks is " + std::to_string(info_.total_chunks) +
                    " but the episodes need " + std::to_string(chunks_needed) +
                    "; chunks are computed from episode_index / chunks_size");
  }
  if (info_.total_episodes != static_cast<int64_t>(episodes_.size())) {
    found.push_back(info_path + ": total_episodes is " + std::to_string(info_.total_episodes) +
                    " but meta/episodes.jsonl lists " + std::to_string(episodes_.size()));
  }
  for (const auto& [split, range] : info_.splits.items()) {
    if (!range.is_string()) continue;
    const std::string text = range.get<std::string>();
    const size_t colon = text.find(':');
    if (colon == std::string::npos) continue;
    const int64_t end = std::atoll(text.c_str() + colon + 1);
    if (end > static_cast<int64_t>(episodes_.size())) {
      found.push_back(info_path + ": splits." + split + " \"" + text + "\" goes beyond the " +
                      std::to_string(episodes_.size()) +
                      " episodes; every episode in meta/episodes.jsonl is used");
    }
  }
  if (ends_with(info_.data_path, ".parquet")) {
    found.push_back(info_path + ": data_path \"" + info_.data_path +
                    "\" is parquet, which is not readable here; convert to the HDF5 layout");
  }
  for (const auto& key : info_.video_keys()) {
    if (info_.video_path.empty()) {
      found.push_back(info_path + ": camera " + key + " is declared but there is no video_path");
      continue;
    }
    int64_t missing = 0;
    std::string first_missing;
    for (const auto& e : episodes_) {
      const std::string file = video_file(e.episode_index, key);
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
  for (const auto& e : episodes_) {
    if (!ends_with(info_.data_path, ".parquet") && !fs::exists(data_file(e.episode_index))) {
      found.push_back(data_file(e.episode_index) + ": missing episode data file");
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

void write_episode_hdf5(const std::string& path, const EpisodeData& data) {
  silence_errors();
  fs::create_directories(fs::path(path).parent_path());
  const std::string temporary = path + ".tmp";
  try {
    H5Handle file(h5_check(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                           "create the file", temporary, ""),
                  H5Fclose);
    for (const auto& [name, column] : data.floats) {
      std::vector<hsize_t> dims = {static_cast<hsize_t>(column.rows)};
      // Scalar columns (timestamp) are 1-D as in LeRobot's parquet; vectors are [N, D].
      if (column.cols != 1 || name == "action" || name == "observation.state") {
        dims.push_back(static_cast<hsize_t>(column.cols));
      }
      write_dataset(file.get(), temporary, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, dims,
                    column.values.data());
    }
    for (const auto& [name, column] : data.ints) {
      write_dataset(file.get(), temporary, name, H5T_NATIVE_INT64, H5T_STD_I64LE,
                    {static_cast<hsize_t>(column.size())}, column.data());
    }
    h5_check(H5Fflush(file.get(), H5F_SCOPE_LOCAL), "flush the file", temporary, "");
  } catch (...) {
    fs::remove(temporary);  // never leave a half-written episode behind
    throw;
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    fs::remove(temporary);
    throw Error("cannot rename " + temporary + " to " + path + ": " + ec.message());
  }
}

void write_episodes_stats(const std::string& path, const std::map<int64_t, EpisodeStats>& stats) {
  std::string text;
  for (const auto& [episode_index, features] : stats) {
    nlohmann::json row;
    row["episode_index"] = episode_index;
    row["stats"] = nlohmann::json::object();
    for (const auto& [key, s] : features) row["stats"][key] = stats_to_json(s);
    text += row.dump() + "\n";
  }
  write_file_atomically(path, text);
}

LeRobotWriter::LeRobotWriter(std::string root, DatasetInfo info,
                             std::map<int64_t, std::string> tasks)
    : root_(std::move(root)), info_(std::move(info)), tasks_(std::move(tasks)) {}

std::string LeRobotWriter::episode_video_file(int64_t episode_index,
                                              const std::string& video_key) const {
  return root_ + "/" +
         format_path(info_.video_path, episode_index / info_.chunks_size, episode_index, video_key);
}

void LeRobotWriter::write_episode(const EpisodeInfo& episode, const EpisodeData& data) {
  const std::string path = root_ + "/" +
                           format_path(info_.data_path, episode.episode_index / info_.chunks_size,
                                       episode.episode_index);
  write_episode_hdf5(path, data);
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

  write_file_atomically(root_ + "/meta/info.json", info_.to_json().dump(4) + "\n");
  std::string episodes_text;
  for (const auto& e : episodes_) {
    episodes_text +=
        nlohmann::json{{"episode_index", e.episode_index}, {"tasks", e.tasks}, {"length", e.length}}
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

std::string instruction_prompt(const std::string& task) {
  return "A video recorded from a robot's point of view executing the following instruction: " +
         task;
}

}  // namespace wam::data
