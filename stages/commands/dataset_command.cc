// `wam-pipeline dataset synth|inspect|stats`: make, look at and complete LeRobot-layout datasets.
// Adds the `dataset` command and its subcommands to `app`; after parsing, selected() says whether
// one of them was chosen and run() executes it, returning the process exit status.
#include "cli/command.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/validators.h"
#include "data/canvas_layout.h"
#include "data/dataset_inspect.h"
#include "data/synth_dataset.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "wam/error.h"

namespace wam::cli {
namespace {

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
  return kExitOk;
}

// Augment's params that decide where the cameras go (`dataset inspect` options).
struct SlotOptions {
  std::vector<std::string> cameras;  // empty: every camera of the dataset
  image_ops::Canvas canvas = image_ops::Canvas::kVertical;
  std::vector<int64_t> camera_size;  // [H, W]; empty: each camera's slot size
  image_ops::ResizeMode resize = image_ops::ResizeMode::kStretch;
  int64_t resize_fill = 0;
};

// How each camera maps onto its slot, as Augment would place it with these params.
void print_slots(const data::DatasetReport& r, const SlotOptions& o) {
  std::vector<const data::CameraReport*> cameras;
  for (const data::CameraReport& c : r.cameras) {
    if (o.cameras.empty() ||
        std::find(o.cameras.begin(), o.cameras.end(), c.key) != o.cameras.end()) {
      cameras.push_back(&c);
    }
  }
  for (const auto& key : o.cameras) {
    if (std::none_of(cameras.begin(), cameras.end(), [&](auto* c) { return c->key == key; })) {
      throw Error("dataset inspect: --cameras names " + key + ", which is no camera of " + r.root);
    }
  }
  std::cout << "slots     " << enum_name(o.canvas) << " canvas " << image_ops::kCanvasWidth << "x"
            << image_ops::kCanvasHeight << ", resize " << enum_name(o.resize)
            << " (Augment's canvas, camera_size and resize: --canvas, --camera-size, --resize)\n";
  std::vector<image_ops::Rect> slots;
  try {
    slots = image_ops::canvas_layout(o.canvas, static_cast<int64_t>(cameras.size()),
                                     image_ops::kCanvasHeight, image_ops::kCanvasWidth);
  } catch (const Error& e) {
    std::cout << "  " << e.what() << "\n";
    return;
  }
  for (size_t i = 0; i < cameras.size(); ++i) {
    const data::CameraReport& c = *cameras[i];
    std::cout << "  " << c.key << ": ";
    if (c.videos == 0) {
      std::cout << "no readable video to measure\n";
      continue;
    }
    const image_ops::Rect& slot = slots[i];
    const int64_t height = o.camera_size.empty() ? slot.height : o.camera_size[0];
    const int64_t width = o.camera_size.empty() ? slot.width : o.camera_size[1];
    std::cout << image_ops::describe_camera_mapping(c.height, c.width, height, width, slot,
                                                    o.resize, o.resize_fill)
              << "\n";
  }
}

void print_inspect(const data::DatasetReport& r, const SlotOptions& slots) {
  std::cout << "dataset   " << r.root << " (LeRobot " << r.codebase_version << ")\n"
            << "episodes  " << r.episodes << "\n"
            << "frames    " << r.frames << " at " << r.fps << " fps\n"
            << "tasks     " << r.tasks << "\n";
  for (const auto& [name, shape] : r.vectors) {
    std::cout << std::left << std::setw(10) << name << shape << "\n";
  }
  std::cout << "stats     "
            << (r.stats_source.empty() ? "missing (run: wam-pipeline dataset stats " + r.root + ")"
                                       : r.stats_source)
            << "\n";
  std::string scope = std::to_string(r.inspected_episodes) + " episodes";
  if (r.inspected_episodes < r.episodes) {
    scope = std::to_string(r.inspected_episodes) + " of " + std::to_string(r.episodes) +
            " episodes (evenly spaced; --episodes 0 reads all)";
  }
  std::cout << "cameras   " << r.cameras.size() << " (videos of " << scope << ")\n";
  for (const data::CameraReport& c : r.cameras) {
    std::cout << "  " << c.key << ": ";
    if (c.videos == 0) {
      std::cout << (c.unreadable ? "unreadable" : "no video files") << "\n";
      continue;
    }
    std::cout << c.codec << " " << c.width << "x" << c.height << ", " << c.frames << " frames in "
              << c.videos << (c.videos == 1 ? " video" : " videos") << ", keyframe spacing ";
    if (c.max_keyframe_gap == 0) {
      std::cout << "none (one keyframe per video)\n";
      continue;
    }
    std::cout << "min " << c.min_keyframe_gap << ", max " << c.max_keyframe_gap << " frames";
    if (c.single_keyframe_videos > 0) {
      std::cout << " (" << c.single_keyframe_videos << " videos have a single keyframe)";
    }
    std::cout << "\n";
  }
  print_slots(r, slots);
  std::cout << "problems  " << r.problems.size() << "\n";
  for (const auto& p : r.problems) std::cout << "  - " << p << "\n";
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
  bool b_frames_ = false;
  std::string codebase_version_ = "v2.1";
  uint64_t seed_ = 0;
  std::string size_;  // WxH

  std::string dir_;
  bool force_ = false;
  int64_t inspect_episodes_ = 0;  // 0: all
  SlotOptions slots_;
};

DatasetCommand::DatasetCommand(CLI::App& app) {
  dataset_ = app.add_subcommand("dataset", "Make, inspect and complete LeRobot-layout datasets");
  dataset_->require_subcommand(1);

  synth_ = dataset_->add_subcommand(
      "synth",
      "Write a synthetic LIBERO- or RoboTwin-shaped LeRobot dataset: parquet columns and mp4s "
      "(AV1 unless --codec says otherwise; moving shapes driven by the actions, every frame "
      "stamped with its index)");
  synth_->add_option("--preset", preset_, "Robot and cameras to imitate")
      ->required()
      ->check(CLI::IsMember({"libero", "robotwin"}));
  synth_->add_option("--episodes", episodes_, "Episodes to write")->required()->check(at_least(1));
  synth_->add_option("--out", out_, "Output directory (must not hold a dataset)")->required();
  synth_->add_option("--frames-per-episode", frames_per_episode_, "Frames in each episode")
      ->capture_default_str()
      ->check(at_least(1));
  synth_->add_option("--fps", fps_, "Frame rate (default: the preset's: libero 10, robotwin 25)")
      ->check(at_least(1));
  synth_->add_option("--gop", gop_, "Keyframe interval in frames (LeRobot uses 2)")
      ->capture_default_str()
      ->check(at_least(1));
  synth_
      ->add_option("--codec", codec_,
                   "av1 (libsvtav1, as LeRobot by default), h264 (libx264) or hevc (libx265)")
      ->capture_default_str()
      ->check(CLI::IsMember({"av1", "h264", "hevc"}));
  synth_->add_flag("--b-frames", b_frames_,
                   "With h264 or hevc: B-frames, as those encoders' defaults and many datasets "
                   "have (with a long --gop, the sparse decoding's skipped pictures)");
  synth_
      ->add_option("--format", codebase_version_,
                   "LeRobot layout: v2.1 (a parquet file and an mp4 per episode) or v3.0 "
                   "(episodes share the data file and one mp4 per camera)")
      ->capture_default_str()
      ->check(CLI::IsMember({"v2.1", "v3.0"}));
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
  inspect_->add_option("--cameras", slots_.cameras,
                       "Cameras placed on the canvas, in the sampler's order (default: all)");
  inspect_
      ->add_option("--canvas", slots_.canvas, "Augment's canvas: vertical (default) or robotwin")
      ->transform(CLI::CheckedTransformer(std::map<std::string, image_ops::Canvas>{
          {"vertical", image_ops::Canvas::kVertical}, {"robotwin", image_ops::Canvas::kRobotwin}}));
  inspect_
      ->add_option("--camera-size", slots_.camera_size,
                   "Augment's camera_size H W (default: each camera's slot size)")
      ->expected(2)
      ->check(at_least(1));
  inspect_
      ->add_option("--resize", slots_.resize, "Augment's resize: stretch (default), fit or fill")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, image_ops::ResizeMode>{{"stretch", image_ops::ResizeMode::kStretch},
                                                       {"fit", image_ops::ResizeMode::kFit},
                                                       {"fill", image_ops::ResizeMode::kFill}}));
  inspect_->add_option("--resize-fill", slots_.resize_fill, "Augment's resize_fill (0-255)")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));

  stats_ = dataset_->add_subcommand(
      "stats",
      "Compute min/max/mean/std/count of every numeric column: per episode into "
      "meta/episodes_stats.jsonl, pooled into meta/stats.json (normalisation reads them)");
  stats_->add_option("dir", dir_, "Dataset directory (LeRobot v2.0, v2.1 or v3.0)")->required();
  stats_->add_flag("--force", force_, "Overwrite existing episodes_stats.jsonl and stats.json");
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
    options.b_frames = b_frames_;
    options.codebase_version = codebase_version_;
    options.seed = seed_;
    return run_synth(std::move(options), size_);
  }
  if (inspect_->parsed()) {
    print_inspect(data::inspect_dataset(dir_, inspect_episodes_), slots_);
    return kExitOk;
  }
  const data::StatsResult stats = data::write_dataset_stats(dir_, force_);
  if (stats.written) {
    std::cout << "wrote " << stats.path << " and " << stats.dataset_path << " (" << stats.episodes
              << " episodes)\n";
  } else {
    std::cout << stats.path << " or " << stats.dataset_path
              << " exists; not overwritten (pass --force to recompute)\n";
  }
  return kExitOk;
}

WAM_REGISTER_COMMAND(DatasetCommand);

}  // namespace wam::cli
