// Every shipped pipeline validates against the built-in stages, and no registrar was dropped.
#include <gtest/gtest.h>

#include <filesystem>

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

INSTANTIATE_TEST_SUITE_P(All, ShippedPipeline, ::testing::ValuesIn(shipped_pipelines()),
                         [](const auto& info) {
                           std::string name = info.param.substr(0, info.param.size() - 5);
                           for (char& c : name) c = std::isalnum(c) ? c : '_';
                           return name;
                         });

TEST(BuiltinRegistry, ListsEveryBuiltinStage) {
  EXPECT_EQ(StageRegistry::builtin().types(),
            (std::vector<std::string>{"Augment", "Collate", "EpisodeSampler", "HostToDevice",
                                      "TextEmbed", "TrainStep", "VaeEncode", "VideoDecode",
                                      "VlmEncode"}));
}

}  // namespace
}  // namespace wam
