// Fuzz target: the LeRobot dataset reader (stages/data/lerobot_dataset) on arbitrary metadata.
// One input is up to three parts separated by NUL bytes (which JSON text never holds):
//
//   meta/info.json \0 meta/episodes.jsonl \0 meta/stats.json
//
// written into a scratch dataset whose data/chunk-000/episode_000000.parquet (3 rows: action
// float32[2], frame_index, episode_index 0) and meta/tasks.jsonl are fixed. The dataset is opened,
// its problems listed, every episode read and the action stats pooled.
//
// The oracle: each step succeeds or throws wam::Error. Anything else escaping or any sanitizer
// report is a finding. Seeds: tests/fuzz/seeds/dataset_meta.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "formats/lerobot/lerobot_dataset.h"
#include "fuzz/fuzz_files.h"
#include "wam/error.h"

namespace {

namespace fs = std::filesystem;

const fs::path& scratch_root() {
  static const fs::path root = [] {
    fs::path dir = wam::fuzz::make_scratch_dir("wam-fuzz-dataset");
    fs::create_directories(dir / "meta");
    wam::data::EpisodeData columns;
    columns.floats["action"] = {3, 2, {0, 1, 2, 3, 4, 5}};
    columns.ints["frame_index"] = {0, 1, 2};
    columns.ints["episode_index"] = {0, 0, 0};
    wam::data::DatasetInfo info;
    info.features = {{"action", "float32", {2}, {}, nullptr}};
    wam::data::write_episode_parquet((dir / "data/chunk-000/episode_000000.parquet").string(),
                                     columns, info);
    std::ofstream(dir / "meta/tasks.jsonl") << R"({"task_index": 0, "task": "pick"})"
                                            << "\n";
    return dir;
  }();
  return root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> parts = wam::fuzz::split_at_nul(input, 3);
  const fs::path& root = scratch_root();
  const char* files[] = {"meta/info.json", "meta/episodes.jsonl", "meta/stats.json"};
  for (size_t i = 0; i < 3; ++i) {
    wam::fuzz::write_or_remove(root / files[i], i < parts.size() ? &parts[i] : nullptr);
  }
  try {
    const auto ds = wam::data::LeRobotDataset::open(root.string());
    (void)ds.problems();
    for (const auto& episode : ds.episodes()) {
      try {
        (void)ds.read_episode(episode.episode_index);
      } catch (const wam::Error&) {
      }
    }
    (void)ds.feature_stats("action");
  } catch (const wam::Error&) {
  }
  return 0;
}
