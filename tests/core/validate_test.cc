#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "testing/expect_error.h"
#include "testing/temp_dir.h"
#include "testing/test_stages.h"
#include "wam/pipeline.h"

namespace wam {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Each tests/golden/<name>.json is a broken pipeline; <name>.txt holds the exact diagnostics.
// WAM_UPDATE_GOLDEN=1 rewrites the .txt files from the current output.
class GoldenDiagnostics : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenDiagnostics, MatchesExpectedText) {
  const std::string file = "tests/golden/" + GetParam() + ".json";
  const auto error =
      testing::caught<ConfigError>([&] { load_pipeline(file, {}, testing::test_registry()); });
  ASSERT_TRUE(error) << file << " validated, but it is a broken pipeline";
  const std::string actual = error->diagnostics().render();
  const std::string expected_file = "tests/golden/" + GetParam() + ".txt";
  if (std::getenv("WAM_UPDATE_GOLDEN")) std::ofstream(expected_file) << actual;
  EXPECT_EQ(actual, read_text(expected_file));
}

INSTANTIATE_TEST_SUITE_P(Broken, GoldenDiagnostics,
                         ::testing::Values("unknown_type", "graph_errors", "field_errors",
                                           "param_errors", "malformed"));

// Below a node whose params are bad, what is written is unknown: its readers are not reported.
TEST(Validate, ANodeWithBadParamsDoesNotCascadeIntoFieldErrors) {
  PipelineConfig config;
  config.file = "inline.json";
  config.name = "cascade";
  NodeConfig source, probe;
  source.id = "source";
  source.type = "Count";
  source.params = {{"count", -1}};
  source.pointer = "/nodes/0";
  probe.id = "probe";
  probe.type = "Probe";
  probe.inputs = {"source"};
  probe.params = {{"reads", {{"value", "Int"}}}};
  probe.pointer = "/nodes/1";
  config.nodes = {source, probe};
  const auto error = testing::caught<ConfigError>(
      [&] { ValidatedPipeline::from_config(config, testing::test_registry()); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->diagnostics().render(),
            "inline.json:/nodes/0/params/count [source: Count]: must be >= 0, got -1\n");
}

// A node whose params $ref an include that could not be loaded is not validated: the include's
// one error stands alone, without "unknown param \"$ref\"" or its readers' field errors.
TEST(Validate, AMissingIncludeIsTheOnlyError) {
  testing::TempDir dir;
  dir.write("configs/model/m.json", "{}");  // makes dir the project root of include paths
  const std::string file = dir.write("pipelines/p.json", R"({
    "version": 1, "name": "p", "include": {"data": "configs/data/missing.json"},
    "nodes": [{"id": "source", "type": "Count", "params": {"$ref": "data/source"}},
              {"id": "probe", "type": "Probe", "inputs": ["source"],
               "params": {"reads": {"value": "Int"}, "extra": {"$ref": "data/probe"}}}]})");
  const auto error =
      testing::caught<ConfigError>([&] { load_pipeline(file, {}, testing::test_registry()); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->diagnostics().render(),
            file + ":/include/data: included file " +
                std::filesystem::relative(dir.file("configs/data/missing.json")).string() +
                " does not exist\n");
}

TEST(Validate, ValidPipelineIsTopologicallyOrderedWithEffectiveParams) {
  PipelineConfig config;
  config.file = "inline.json";
  config.name = "fan";
  auto node = [](std::string id, std::string type, std::vector<std::string> inputs,
                 nlohmann::json params = nlohmann::json::object()) {
    NodeConfig n;
    n.id = std::move(id);
    n.type = std::move(type);
    n.inputs = std::move(inputs);
    n.params = std::move(params);
    return n;
  };
  config.nodes = {node("join", "Probe", {"left", "right"}, {{"reads", {{"tag", "String"}}}}),
                  node("left", "Tag", {"source"}, {{"field", "tag"}}), node("source", "Count", {}),
                  node("right", "Tag", {"source"}, {{"field", "mark"}})};
  for (size_t i = 0; i < config.nodes.size(); ++i) {
    config.nodes[i].pointer = "/nodes/" + std::to_string(i);
  }
  ValidatedPipeline p = ValidatedPipeline::from_config(config, testing::test_registry());
  std::vector<std::string> order;
  for (const auto& n : p.nodes()) order.push_back(n.id);
  EXPECT_EQ(order, (std::vector<std::string>{"source", "left", "right", "join"}));
  EXPECT_EQ(p.nodes()[3].inputs, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(p.nodes()[0].outputs, (std::vector<size_t>{1, 2}));
  EXPECT_EQ(p.nodes()[0].params["count"], 10);
  EXPECT_EQ(p.nodes()[2].concurrency.to_string(), "auto");  // the default of parallel stages

  p.keep_upstream_of("left");
  order.clear();
  for (const auto& n : p.nodes()) order.push_back(n.id);
  EXPECT_EQ(order, (std::vector<std::string>{"source", "left"}));
  EXPECT_TRUE(p.nodes()[1].outputs.empty());
  EXPECT_EQ(p.to_dot(),
            "digraph \"fan\" {\n  rankdir=LR;\n  node [shape=box, fontname=\"Helvetica\"];\n"
            "  \"source\" [label=\"source\\nCount\", shape=ellipse];\n"
            "  \"left\" [label=\"left\\nTag\\nconcurrency auto\"];\n"
            "  \"source\" -> \"left\";\n}\n");
  const auto error = testing::caught<ConfigError>([&] { p.keep_upstream_of("lfet"); });
  ASSERT_TRUE(error);
  EXPECT_STREQ(
      error->what(),
      "--stop-after: unknown node \"lfet\"; did you mean \"left\"? (allowed: source, left)");
}

}  // namespace
}  // namespace wam
