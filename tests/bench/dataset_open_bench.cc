// The time to open a LeRobot dataset of many episodes: meta files, then every episode's parquet
// columns (what EpisodeSampler does before the first sample), for the v2.1 layout (a file per
// episode) and v3.0 (episodes share a file). Episodes are LIBERO-shaped: 7-D action, 15-D state,
// timestamp and four index columns, written by LeRobotWriter (float32 LISTs, SNAPPY).
//   wam_bench_dataset_open [episodes=1000] [frames=200] [dir=/tmp/wam_bench_dataset_open]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "formats/lerobot/lerobot_dataset.h"

namespace {

namespace fs = std::filesystem;
using wam::data::DatasetInfo;
using wam::data::EpisodeData;
using wam::data::LeRobotDataset;

void write(const std::string& root, const std::string& version, int64_t episodes, int64_t frames) {
  DatasetInfo info;
  info.codebase_version = version;
  info.fps = 10;
  info.features = {{"action", "float32", {7}, {}, nullptr},
                   {"observation.state", "float32", {15}, {}, nullptr},
                   {"timestamp", "float32", {1}, {}, nullptr}};
  for (const char* key : {"frame_index", "episode_index", "index", "task_index"}) {
    info.features.push_back({key, "int64", {1}, {}, nullptr});
  }
  wam::data::LeRobotWriter writer(root, info, {{0, "pick up the bowl"}});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int64_t e = 0; e < episodes; ++e) {
    EpisodeData data;
    data.floats["action"] = {frames, 7, {}};
    data.floats["observation.state"] = {frames, 15, {}};
    data.floats["timestamp"] = {frames, 1, {}};
    for (int64_t t = 0; t < frames; ++t) {
      for (int d = 0; d < 7; ++d) data.floats["action"].values.push_back(uniform(rng));
      for (int d = 0; d < 15; ++d) data.floats["observation.state"].values.push_back(uniform(rng));
      data.floats["timestamp"].values.push_back(static_cast<float>(t) / 10);
      data.ints["frame_index"].push_back(t);
      data.ints["episode_index"].push_back(e);
      data.ints["index"].push_back(e * frames + t);
      data.ints["task_index"].push_back(0);
    }
    writer.write_episode({e, {"pick up the bowl"}, frames}, data);
  }
  writer.finish();
}

uint64_t bytes_under(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".parquet") {
      total += entry.file_size();
    }
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t episodes = argc > 1 ? std::atoll(argv[1]) : 1000;
  const int64_t frames = argc > 2 ? std::atoll(argv[2]) : 200;
  const fs::path dir = argc > 3 ? argv[3] : "/tmp/wam_bench_dataset_open";
  std::printf("%lld episodes of %lld frames (LIBERO-shaped columns)\n",
              static_cast<long long>(episodes), static_cast<long long>(frames));
  std::printf("%-6s %12s %12s %14s %12s\n", "layout", "parquet MB", "meta ms", "meta+columns ms",
              "rows/s");
  for (const char* version : {"v2.1", "v3.0"}) {
    const std::string root = (dir / version).string();
    if (!fs::exists(root + "/meta/info.json")) {
      fs::remove_all(root);
      write(root, version, episodes, frames);
    }
    // Best of 3: the files are in the page cache after the first pass, as in a training run that
    // reopens its dataset.
    double best_meta = 1e30, best_all = 1e30;
    for (int repeat = 0; repeat < 3; ++repeat) {
      const auto start = std::chrono::steady_clock::now();
      const LeRobotDataset ds = LeRobotDataset::open(root);
      const auto opened = std::chrono::steady_clock::now();
      int64_t rows = 0;
      for (const auto& e : ds.episodes()) {
        rows += ds.read_episode(e.episode_index).floats.at("action").rows;
      }
      const auto done = std::chrono::steady_clock::now();
      if (rows != episodes * frames) {
        std::fprintf(stderr, "read %lld rows, expected %lld\n", static_cast<long long>(rows),
                     static_cast<long long>(episodes * frames));
        return 1;
      }
      best_meta = std::min(best_meta, std::chrono::duration<double>(opened - start).count());
      best_all = std::min(best_all, std::chrono::duration<double>(done - start).count());
    }
    std::printf("%-6s %12.1f %12.1f %14.1f %12.0f\n", version, bytes_under(root) / 1e6,
                best_meta * 1e3, best_all * 1e3, static_cast<double>(episodes * frames) / best_all);
  }
  return 0;
}
