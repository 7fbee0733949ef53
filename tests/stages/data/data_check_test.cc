// `validate --data`'s checks (stages/data/data_check.h) on a written dataset shaped like the
// newcomer's (one 640x480 camera, 26-D action and state) and on the real GR00T sample: every
// problem with its pointer and the dataset's file, and each camera's way onto its canvas slot.
#include "data/data_check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/canvas_layout.h"
#include "formats/lerobot/lerobot_dataset.h"

namespace wam::data {
namespace {

namespace fs = std::filesystem;
namespace ops = image_ops;

const char* kRealDataset = WAM_SOURCE_DIR "/../shared/data/lerobot-gr00t-picknplace";
const char* kNode = "sampler: EpisodeSampler";

class DataCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() /
             ("data_check_test_" + std::to_string(::getpid()) + "_" +
              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
    fs::remove_all(root_);
    write_dataset(root_, 30);
  }
  void TearDown() override {
    fs::remove_all(root_);
    fs::remove_all(root_ + "_b");
  }

  // One episode of 4 frames at `fps`: a 640x480 camera (an empty video file: only meta/ is read,
  // and the video looked for), 26-D action and state, per-episode stats.
  static void write_dataset(const std::string& root, double fps) {
    DatasetInfo info;
    info.fps = fps;
    info.features = {{"observation.images.front",
                      "video",
                      {480, 640, 3},
                      {"height", "width", "channel"},
                      nlohmann::json{{"video.codec", "av1"}}},
                     {"action", "float32", {26}, {}, nullptr},
                     {"observation.state", "float32", {26}, {}, nullptr},
                     {"frame_index", "int64", {1}, {}, nullptr},
                     {"task_index", "int64", {1}, {}, nullptr}};
    LeRobotWriter writer(root, info, {{0, "fold the towel"}});
    EpisodeData data;
    data.floats["action"] = {4, 26, std::vector<float>(4 * 26, 0.5f)};
    data.floats["observation.state"] = {4, 26, std::vector<float>(4 * 26, 0.25f)};
    for (int64_t t = 0; t < 4; ++t) {
      data.ints["frame_index"].push_back(t);
      data.ints["task_index"].push_back(0);
    }
    writer.write_episode({0, {"fold the towel"}, 4}, data);
    writer.finish();
    const fs::path video = root + "/" + format_path(kVideoPath, 0, 0, "observation.images.front");
    fs::create_directories(video.parent_path());
    std::ofstream(video.string()).put('\0');
  }

  stages::EpisodeSamplerParams sampler() const {
    stages::EpisodeSamplerParams p;
    p.dataset_dirs = {root_};
    p.cameras = {"observation.images.front"};
    p.action_layout = {{0, 26, 0}};
    p.state_layout = {{0, 26, 0}};
    return p;
  }

  std::vector<std::string> rendered(const DataCheckResult& result) const {
    std::vector<std::string> lines;
    for (const auto& d : result.diagnostics.items()) lines.push_back(d.render());
    return lines;
  }

  std::string root_;
};

TEST_F(DataCheckTest, AFittingSamplerPassesWithWhatWasFound) {
  DataCheckResult result;
  result.diagnostics.set_file("p.json");
  stages::EpisodeSamplerParams p = sampler();
  p.action_layout = {{0, 20, 0}};
  const auto sizes = check_sampler_data(p, "/nodes/0/params", kNode, result);
  EXPECT_TRUE(result.diagnostics.empty()) << result.diagnostics.render();
  EXPECT_EQ(result.notes,
            (std::vector<std::string>{
                "[sampler: EpisodeSampler] " + root_ +
                    ": LeRobot v2.1, 1 episodes at 30 fps, action 26-D, state 26-D, stats: "
                    "meta/episodes_stats.jsonl",
                "[sampler: EpisodeSampler] " + root_ +
                    ": action dims [20, 26) are in no action_layout range, so the model never "
                    "sees them"}));
  ASSERT_EQ(sizes.size(), 1u);
  ASSERT_TRUE(sizes[0]);
  EXPECT_EQ(sizes[0]->height, 480);
  EXPECT_EQ(sizes[0]->width, 640);
}

TEST_F(DataCheckTest, EachProblemNamesItsPointerAndTheDatasetFile) {
  const std::string video = root_ + "/" + format_path(kVideoPath, 0, 0, "observation.images.front");
  fs::remove(video);
  fs::remove(root_ + "/meta/episodes_stats.jsonl");
  fs::remove(root_ + "/meta/stats.json");
  write_dataset(root_ + "_b", 10);
  DataCheckResult result;
  result.diagnostics.set_file("p.json");
  stages::EpisodeSamplerParams p = sampler();
  p.dataset_dirs = {root_, root_ + "_b", root_ + "_missing"};
  p.cameras = {"observation.images.front", "observation.images.wrist", "action"};
  p.action_layout = {{0, 7, 0}, {7, 30, 40}};
  p.state_layout = {{0, 44, 0}};
  check_sampler_data(p, "/nodes/0/params", kNode, result);
  const std::string info = root_ + "/meta/info.json";
  const std::string info_b = root_ + "_b/meta/info.json";
  const std::string video_keys = " (video features: observation.images.front)";
  EXPECT_EQ(
      rendered(result),
      (std::vector<std::string>{
          "p.json:/nodes/0/params/cameras/0 [sampler: EpisodeSampler]: camera "
          "\"observation.images.front\" is a video feature of " +
              info + " but has no video files (" + video + " is missing)",
          "p.json:/nodes/0/params/cameras/1 [sampler: EpisodeSampler]: " + info +
              " has no feature \"observation.images.wrist\"" + video_keys,
          "p.json:/nodes/0/params/cameras/2 [sampler: EpisodeSampler]: " + info +
              ": feature \"action\" is float32, not a video" + video_keys,
          "p.json:/nodes/0/params/action_layout/1 [sampler: EpisodeSampler]: [7,30,40] reads "
          "action dims [7, 30), but " +
              info + " gives action 26 dims",
          "p.json:/nodes/0/params/state_layout/0 [sampler: EpisodeSampler]: [0,44,0] reads "
          "observation.state dims [0, 44), but " +
              info + " gives observation.state 26 dims",
          "p.json:/nodes/0/params/normalization [sampler: EpisodeSampler]: " + root_ +
              "/meta/episodes_stats.jsonl and " + root_ +
              "/meta/stats.json: no \"action\" stats; normalisation needs them: run "
              "`wam-pipeline dataset stats " +
              root_ + "`",
          "p.json:/nodes/0/params/normalization [sampler: EpisodeSampler]: " + root_ +
              "/meta/episodes_stats.jsonl and " + root_ +
              "/meta/stats.json: no \"observation.state\" stats; normalisation needs them: run "
              "`wam-pipeline dataset stats " +
              root_ + "`",
          "p.json:/nodes/0/params/dataset_dirs/1 [sampler: EpisodeSampler]: " + info_b +
              ": fps 10, but " + root_ + " has 30; a sampler's datasets must share fps",
          "p.json:/nodes/0/params/cameras/1 [sampler: EpisodeSampler]: " + info_b +
              " has no feature \"observation.images.wrist\"" + video_keys,
          "p.json:/nodes/0/params/cameras/2 [sampler: EpisodeSampler]: " + info_b +
              ": feature \"action\" is float32, not a video" + video_keys,
          "p.json:/nodes/0/params/action_layout/1 [sampler: EpisodeSampler]: [7,30,40] reads "
          "action dims [7, 30), but " +
              info_b + " gives action 26 dims",
          "p.json:/nodes/0/params/state_layout/0 [sampler: EpisodeSampler]: [0,44,0] reads "
          "observation.state dims [0, 44), but " +
              info_b + " gives observation.state 26 dims",
          "p.json:/nodes/0/params/dataset_dirs/2 [sampler: EpisodeSampler]: " + root_ +
              "_missing/meta/info.json: cannot open; is " + root_ +
              "_missing a LeRobot dataset directory?"}));
}

TEST_F(DataCheckTest, LiberoStateTransformNeedsFifteenDims) {
  DataCheckResult result;
  stages::EpisodeSamplerParams p = sampler();
  p.state_transform = stages::StateTransform::kLiberoEeRot6d;
  check_sampler_data(p, "/sampler", kNode, result);
  EXPECT_EQ(rendered(result),
            (std::vector<std::string>{
                ":/sampler/state_transform [sampler: EpisodeSampler]: libero_ee_rot6d needs "
                "LIBERO's 15-D observation.state, but " +
                root_ + "/meta/info.json gives observation.state 26 dims"}));
}

// The newcomer's 640x480 camera in the 384x256 slot of a one-camera vertical canvas.
TEST_F(DataCheckTest, EachCameraMappingOntoItsSlotIsShown) {
  const std::vector<std::string> cameras = {"observation.images.front"};
  const std::vector<std::optional<FrameSize>> sizes = {FrameSize{480, 640}};
  stages::AugmentParams augment;
  augment.camera_size = {384, 256};
  std::vector<std::string> notes;
  for (auto mode : {ops::ResizeMode::kStretch, ops::ResizeMode::kFit, ops::ResizeMode::kFill}) {
    DataCheckResult result;
    augment.resize = mode;
    augment.resize_fill = 16;
    check_canvas_mapping(augment, cameras, sizes, "/nodes/2/params", "augment: Augment", result);
    EXPECT_TRUE(result.diagnostics.empty()) << result.diagnostics.render();
    notes.insert(notes.end(), result.notes.begin(), result.notes.end());
  }
  EXPECT_EQ(notes,
            (std::vector<std::string>{
                "[augment: Augment] observation.images.front: 640x480 -> slot 256x384 at (0, 0) "
                "of the canvas: stretch, scale 0.4 x 0.8 (stretched 2x taller; resize \"fit\" or "
                "\"fill\" keeps the aspect ratio)",
                "[augment: Augment] observation.images.front: 640x480 -> slot 256x384 at (0, 0) "
                "of the canvas: fit, scale 0.4 x 0.4, image 256x192 at offset (0, 96), bars "
                "filled with level 16",
                "[augment: Augment] observation.images.front: 640x480 -> slot 256x384 at (0, 0) "
                "of the canvas: fill, scale 0.8 x 0.8, keeps the centre 320x480 at offset (160, "
                "0)"}));

  // Through a camera_size of another shape than the slot: RoboTwin's high camera.
  DataCheckResult robotwin;
  augment.canvas = ops::Canvas::kRobotwin;
  augment.camera_size = {240, 320};
  augment.resize = ops::ResizeMode::kFit;
  augment.resize_fill = 0;
  check_canvas_mapping(augment, {"high", "left", "right"},
                       {FrameSize{480, 640}, std::nullopt, FrameSize{480, 640}}, "/p", "a: Augment",
                       robotwin);
  EXPECT_EQ(robotwin.notes,
            (std::vector<std::string>{
                "[a: Augment] high: 640x480 -> camera 320x240 -> slot 256x256 at (0, 0) of the "
                "canvas: fit, scale 0.4 x 0.4, image 256x192 at offset (0, 32), bars filled with "
                "level 0",
                "[a: Augment] right: 640x480 -> camera 320x240 -> slot 128x128 at (128, 256) of "
                "the canvas: fit, scale 0.2 x 0.2, image 128x96 at offset (0, 16), bars filled "
                "with level 0"}));

  DataCheckResult wrong;
  check_canvas_mapping(augment, cameras, sizes, "/nodes/2/params", "augment: Augment", wrong);
  EXPECT_EQ(rendered(wrong),
            (std::vector<std::string>{
                ":/nodes/2/params/canvas [augment: Augment]: canvas \"robotwin\" needs 3 cameras "
                "(high, left wrist, right wrist), got 1; check the sampler's cameras"}));
}

TEST(PlacementTest, FitCentresAndFillCutsTheCentre) {
  const ops::Placement fit = ops::place(ops::ResizeMode::kFit, 480, 640, 384, 256);
  EXPECT_EQ(
      (std::vector<int64_t>{fit.target.top, fit.target.left, fit.target.height, fit.target.width}),
      (std::vector<int64_t>{96, 0, 192, 256}));
  const ops::Placement fill = ops::place(ops::ResizeMode::kFill, 480, 640, 384, 256);
  EXPECT_EQ((std::vector<int64_t>{fill.source.top, fill.source.left, fill.source.height,
                                  fill.source.width}),
            (std::vector<int64_t>{0, 160, 480, 320}));
  const ops::Placement stretch = ops::place(ops::ResizeMode::kStretch, 480, 640, 384, 256);
  EXPECT_EQ(stretch.source.width, 640);
  EXPECT_EQ(stretch.target.height, 384);
}

// The README's own-dataset example: the GR00T demo's 256x256 camera in the one-camera canvas.
TEST(DataCheckRealTest, TheGr00tSampleFitsItsDataConfig) {
  if (!fs::exists(kRealDataset)) GTEST_SKIP() << kRealDataset << " is not present";
  DataCheckResult result;
  stages::EpisodeSamplerParams p;
  p.dataset_dirs = {kRealDataset};
  p.cameras = {"observation.images.ego_view"};
  p.action_layout = {{0, 44, 0}};
  p.state_layout = {{0, 44, 0}};
  const auto sizes = check_sampler_data(p, "/nodes/0/params", kNode, result);
  EXPECT_TRUE(result.diagnostics.empty()) << result.diagnostics.render();
  const std::string root = fs::absolute(kRealDataset).lexically_normal().string();
  stages::AugmentParams augment;
  augment.camera_size = {384, 256};
  check_canvas_mapping(augment, p.cameras, sizes, "/nodes/2/params", "augment: Augment", result);
  EXPECT_EQ(result.notes,
            (std::vector<std::string>{
                "[sampler: EpisodeSampler] " + root +
                    ": LeRobot v2.0, 5 episodes at 20 fps, action 44-D, state 44-D, stats: "
                    "meta/stats.json",
                "[augment: Augment] observation.images.ego_view: 256x256 -> slot 256x384 at (0, "
                "0) of the canvas: stretch, scale 1 x 1.5 (stretched 1.5x taller; resize \"fit\" "
                "or \"fill\" keeps the aspect ratio)"}));
}

}  // namespace
}  // namespace wam::data
