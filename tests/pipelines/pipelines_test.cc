// Every shipped pipeline validates against the built-in stages, and no registrar was dropped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/expect_error.h"
#include "wam/pipeline.h"

namespace wam {
namespace {

std::vector<std::string> shipped_pipelines() {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(WAM_SOURCE_DIR "/pipelines")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class ShippedPipeline : public ::testing::TestWithParam<std::string> {};

TEST_P(ShippedPipeline, Validates) {
  const std::string file = std::string(WAM_SOURCE_DIR) + "/pipelines/" + GetParam();
  try {
    ValidatedPipeline pipeline = load_pipeline(file);
    EXPECT_FALSE(pipeline.nodes().empty());
    EXPECT_EQ(pipeline.nodes()[0].kind, StageKind::kSource);
  } catch (const ConfigError& e) {
    FAIL() << e.what();
  }
}

// VaeEncode takes float video only (it rejects uint8 at run time): where Augment writes uint8
// video, a HostToDevice node, which normalises it, must lie between them.
TEST_P(ShippedPipeline, Uint8VideoPassesHostToDeviceBeforeVaeEncode) {
  const ValidatedPipeline pipeline =
      load_pipeline(std::string(WAM_SOURCE_DIR) + "/pipelines/" + GetParam());
  const auto& nodes = pipeline.nodes();
  // Topological order: a node's inputs come before it.
  std::vector<bool> uint8_video(nodes.size(), false);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ValidatedNode& node = nodes[i];
    for (size_t input : node.inputs) uint8_video[i] = uint8_video[i] || uint8_video[input];
    if (node.type == "Augment") uint8_video[i] = node.params.at("video_dtype") == "uint8";
    if (node.type == "HostToDevice") uint8_video[i] = false;
    if (node.type == "VaeEncode") {
      EXPECT_FALSE(uint8_video[i]) << node.id;
    }
  }
}

// The online and compile training graphs quantise the video in Augment. The baseline keeps float
// video end to end, and the data graphs keep it too: their sparse and full decodes are compared
// batch for batch, and their figures are the data path as measured so far.
TEST_P(ShippedPipeline, OnlineAndCompileTrainingQuantiseVideoInAugment) {
  const ValidatedPipeline pipeline =
      load_pipeline(std::string(WAM_SOURCE_DIR) + "/pipelines/" + GetParam());
  const std::string& name = pipeline.name();
  const bool training = name.find("_data_") == std::string::npos;
  const bool online_or_compile =
      name.find("_online") != std::string::npos || name.find("_compile") != std::string::npos;
  const ValidatedNode* augment = pipeline.find("augment");
  ASSERT_NE(augment, nullptr);
  EXPECT_EQ(augment->params.at("video_dtype"), training && online_or_compile ? "uint8" : "float32");
}

INSTANTIATE_TEST_SUITE_P(All, ShippedPipeline, ::testing::ValuesIn(shipped_pipelines()),
                         [](const auto& info) {
                           std::string name = info.param.substr(0, info.param.size() - 5);
                           for (char& c : name) c = std::isalnum(c) ? c : '_';
                           return name;
                         });

// The built-in stages' params-only rules and contracts, caught by validation before anything is
// opened: each tests/golden/<name>.json here is broken; <name>.txt holds the exact diagnostics.
// WAM_UPDATE_GOLDEN=1 rewrites the .txt files from the current output.
class StageGoldenDiagnostics : public ::testing::TestWithParam<std::string> {};

TEST_P(StageGoldenDiagnostics, MatchesExpectedText) {
  const std::string file = "tests/golden/" + GetParam() + ".json";
  const auto error = testing::caught<ConfigError>([&] { load_pipeline(file); });
  ASSERT_TRUE(error) << file << " validated, but it is a broken pipeline";
  const std::string actual = error->diagnostics().render();
  const std::string expected_file = "tests/golden/" + GetParam() + ".txt";
  if (std::getenv("WAM_UPDATE_GOLDEN")) std::ofstream(expected_file) << actual;
  std::ifstream in(expected_file);
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str());
}

INSTANTIATE_TEST_SUITE_P(Broken, StageGoldenDiagnostics,
                         ::testing::Values("stage_param_checks", "h2d_video_contract"));

TEST(BuiltinRegistry, ListsEveryBuiltinStage) {
  EXPECT_EQ(StageRegistry::builtin().types(),
            (std::vector<std::string>{"Augment", "Collate", "EpisodeSampler", "HostToDevice",
                                      "LatentCacheLookup", "TextEmbed", "TrainStep", "VaeEncode",
                                      "VideoDecode", "VlmEncode"}));
}

}  // namespace
}  // namespace wam
