#include "wam/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "testing/temp_dir.h"

namespace wam {
namespace {

using nlohmann::json;
using testing::TempDir;

TEST(Config, ParseErrorsGiveLineAndColumn) {
  TempDir dir;
  std::string file =
      dir.write("bad.json", "{\n  \"name\": \"x\",\n  \"nodes\": [\n    {\"id\": }\n");
  Diagnostics d(file);
  load_pipeline_config(file, {}, d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.items()[0].location, "4:13");
  EXPECT_EQ(d.items()[0].render(),
            file +
                ":4:13: malformed JSON: syntax error while parsing value - unexpected '}'; "
                "expected '[', '{', or a literal");
}

TEST(Config, MissingFileIsReported) {
  Diagnostics d("none.json");
  load_pipeline_config("/nonexistent/p.json", {}, d);
  EXPECT_EQ(d.render(), "/nonexistent/p.json: cannot read file: no such file\n");
}

TEST(Config, EnvironmentExpansionWithDefaults) {
  setenv("WAM_TEST_ROOT", "/datasets", 1);
  unsetenv("WAM_TEST_UNSET");
  unsetenv("WAM_DATA_ROOT");
  unsetenv("WAM_CACHE_ROOT");
  unsetenv("WAM_LATENT_CACHE");
  json value = {{"a", "${WAM_TEST_ROOT}/robotwin"},
                {"b", "${WAM_TEST_UNSET:-fallback}/x"},
                {"c", {"${WAM_DATA_ROOT}", "${WAM_LATENT_CACHE}"}},
                {"d", "${WAM_TEST_UNSET}"}};
  Diagnostics d("p.json");
  expand_environment(value, "p.json", "/params", d);
  EXPECT_EQ(value["a"], "/datasets/robotwin");
  EXPECT_EQ(value["b"], "fallback/x");
  EXPECT_EQ(value["c"], json({"data", ".cache/wam/latents"}));
  EXPECT_EQ(d.render(),
            "p.json:/params/d: environment variable WAM_TEST_UNSET is not set; export "
            "it or write ${WAM_TEST_UNSET:-default}\n");
}

// What --print-config shows: each variable with a project default, resolved, set ones unmarked.
TEST(Config, DescribeEnvironmentResolvesEachKnownVariable) {
  for (const char* name :
       {"WAM_DATA_ROOT", "LIBERO_DATA_ROOT", "ROBOTWIN_DATA_ROOT", "WAM_LATENT_CACHE",
        "WAM_COMPILE_CACHE", "WAM_OUTPUT_ROOT", "WAM_CHECKPOINT_ROOT"}) {
    unsetenv(name);
  }
  setenv("WAM_CACHE_ROOT", "/fast/cache", 1);
  setenv("ROBOTWIN_DATA_ROOT", "/datasets/robotwin", 1);
  EXPECT_EQ(describe_environment(),
            "environment (${VAR} in pipeline and config files):\n"
            "  WAM_DATA_ROOT=data  (default)\n"
            "  LIBERO_DATA_ROOT=data/libero  (default)\n"
            "  ROBOTWIN_DATA_ROOT=/datasets/robotwin\n"
            "  WAM_CACHE_ROOT=/fast/cache\n"
            "  WAM_LATENT_CACHE=/fast/cache/latents  (default)\n"
            "  WAM_COMPILE_CACHE=/fast/cache/torch_compile  (default)\n"
            "  WAM_OUTPUT_ROOT=runs  (default)\n"
            "  WAM_CHECKPOINT_ROOT=checkpoints  (default)\n");
  unsetenv("WAM_CACHE_ROOT");
  unsetenv("ROBOTWIN_DATA_ROOT");
}

TEST(Config, OverridesAddressKeysIndicesAndNodeIds) {
  json doc = json::parse(R"({"settings": {"batch_size": 16},
    "nodes": [{"id": "src", "params": {}}, {"id": "decode", "params": {"mode": "sparse"}}]})");
  Diagnostics d("p.json");
  apply_override(doc, "settings.batch_size=8", d);
  apply_override(doc, "nodes.decode.params.mode=full", d);
  apply_override(doc, "nodes.0.params.cameras=[\"a\",\"b\"]", d);
  apply_override(doc, "include.model=configs/model/tiny.json", d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(doc["settings"]["batch_size"], 8);
  EXPECT_EQ(doc["nodes"][1]["params"]["mode"], "full");
  EXPECT_EQ(doc["nodes"][0]["params"]["cameras"], json({"a", "b"}));
  EXPECT_EQ(doc["include"]["model"], "configs/model/tiny.json");

  apply_override(doc, "nodes.augment.params.x=1", d);
  apply_override(doc, "no-equals-sign", d);
  EXPECT_EQ(d.render(),
            "--set nodes.augment.params.x=1: no element \"augment\" in nodes\n"
            "--set no-equals-sign: expected path.to.key=VALUE\n");
}

TEST(Config, IncludesAndRefsResolveWithMergedSiblings) {
  TempDir dir;
  dir.write("configs/data/robotwin.json",
            R"({"window": {"num_frames": 33, "ratio": 4}, "cameras": ["cam_high"]})");
  std::string file = dir.write("pipelines/p.json", R"({
    "version": 1, "name": "p", "include": {"data": "configs/data/robotwin.json"},
    "nodes": [{"id": "s", "type": "Count",
               "params": {"window": {"$ref": "data/window", "ratio": 2},
                          "cams": {"$ref": "data/cameras"}}}]})");
  Diagnostics d(file);
  PipelineConfig config = load_pipeline_config(file, {}, d);
  EXPECT_TRUE(d.empty()) << d.render();
  ASSERT_EQ(config.nodes.size(), 1u);
  EXPECT_EQ(config.nodes[0].params["window"], json({{"num_frames", 33}, {"ratio", 2}}));
  EXPECT_EQ(config.nodes[0].params["cams"], json({"cam_high"}));
}

TEST(Config, BadIncludesAndRefsAreReported) {
  TempDir dir;
  dir.write("configs/data/a.json", R"({"x": 1})");
  std::string file = dir.write("pipelines/p.json", R"({
    "version": 1, "name": "p",
    "include": {"data": "configs/data/a.json", "model": "configs/model/missing.json"},
    "nodes": [{"id": "s", "type": "Count",
               "params": {"a": {"$ref": "dta/x"}, "b": {"$ref": "data/y"}}}]})");
  Diagnostics d(file);
  load_pipeline_config(file, {}, d);
  EXPECT_EQ(d.render(),
            file + ":/include/model: included file " +
                std::filesystem::relative(dir.file("configs/model/missing.json")).string() +
                " does not exist\n" + file +
                ":/nodes/0/params/a/$ref: unknown include \"dta\"; did you mean \"data\"? "
                "(allowed: data)\n" +
                file + ":/nodes/0/params/b/$ref: \"/y\" does not exist in include \"data\" (" +
                std::filesystem::relative(dir.file("configs/data/a.json")).string() + ")\n");
}

TEST(Config, OverrideSwapsAWholeInclude) {
  TempDir dir;
  dir.write("configs/model/small.json", R"({"width": 512})");
  dir.write("configs/model/tiny.json", R"({"width": 64})");
  std::string file = dir.write("pipelines/p.json", R"({
    "version": 1, "name": "p", "include": {"model": "configs/model/small.json"},
    "nodes": [{"id": "s", "type": "Count", "params": {"width": {"$ref": "model/width"}}}]})");
  Diagnostics d(file);
  auto config =
      load_pipeline_config(file, {{"include.model=" + dir.file("configs/model/tiny.json")}}, d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(config.nodes[0].params["width"], 64);
}

// Base and derived pipelines as the shipped ones are written: the derived file names its base
// relative to its own folder, merges top-level values (RFC 7386) and patches nodes by id.
TEST(Config, ExtendsMergesTopLevelValuesAndPatchesNodesById) {
  TempDir dir;
  dir.write("configs/data/a.json", R"({"n": 1})");
  dir.write("configs/data/b.json", R"({"n": 2})");
  dir.write("configs/model/m.json", R"({"width": 8})");
  dir.write("pipelines/base.json", R"({
    "version": 1, "name": "base", "description": "the base",
    "include": {"data": "configs/data/a.json", "model": "configs/model/m.json"},
    "settings": {"seed": 1, "batch_size": 4},
    "nodes": [{"id": "src", "type": "Count", "params": {"count": {"$ref": "data/n"}}},
              {"id": "sink", "type": "Delay", "inputs": ["src"],
               "params": {"ms": 5, "jitter": 1}}]})");
  std::string file = dir.write("pipelines/derived.json", R"({
    "extends": "base.json", "name": "derived", "description": null,
    "include": {"data": "configs/data/b.json"},
    "settings": {"batch_size": 8},
    "nodes": {"sink": {"params": {"ms": 7, "jitter": null}, "on_error": "skip"}}})");
  Diagnostics d(file);
  ResolvedDocument resolved = resolve_extends(file, d);
  EXPECT_TRUE(d.empty()) << d.render();
  ASSERT_TRUE(resolved.document);
  EXPECT_EQ(*resolved.document, json::parse(R"({
    "version": 1, "name": "derived",
    "include": {"data": "configs/data/b.json", "model": "configs/model/m.json"},
    "settings": {"seed": 1, "batch_size": 8},
    "nodes": [{"id": "src", "type": "Count", "params": {"count": {"$ref": "data/n"}}},
              {"id": "sink", "type": "Delay", "inputs": ["src"], "params": {"ms": 7},
               "on_error": "skip"}]})"));
  EXPECT_EQ(resolved.include_files,
            (std::map<std::string, std::string>{{"data", file},
                                                {"model", dir.file("pipelines/base.json")}}));

  PipelineConfig config = load_pipeline_config(file, {{"nodes.src.params.count=3"}}, d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(config.name, "derived");
  EXPECT_EQ(config.nodes[0].params, json({{"count", 3}}));
  EXPECT_EQ(config.includes.at("data"), json({{"n", 2}}));
}

// A base in another project: its includes are relative to that project, not the deriving file's.
TEST(Config, ABaseIncludesRelativeToItsOwnProject) {
  TempDir shipped, own;
  shipped.write("configs/data/a.json", R"({"n": 4})");
  const std::string base = shipped.write("pipelines/base.json", R"({
    "version": 1, "name": "base", "include": {"data": "configs/data/a.json"},
    "nodes": [{"id": "src", "type": "Count", "params": {"count": {"$ref": "data/n"}}}]})");
  own.write("configs/data/own.json", R"({"n": 99})");
  std::string file = own.write("mine/p.json", R"({"extends": ")" + base + R"(", "name": "mine"})");
  Diagnostics d(file);
  PipelineConfig config = load_pipeline_config(file, {}, d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(config.nodes[0].params, json({{"count", 4}}));

  // --set names a path relative to the working directory, as a shell user expects.
  config = load_pipeline_config(file, {{"include.data=" + own.file("configs/data/own.json")}}, d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(config.nodes[0].params, json({{"count", 99}}));
}

// The working directory for the scope of one test.
class InDirectory {
 public:
  explicit InDirectory(const std::filesystem::path& dir)
      : previous_(std::filesystem::current_path()) {
    std::filesystem::current_path(dir);
  }
  ~InDirectory() { std::filesystem::current_path(previous_); }

 private:
  std::filesystem::path previous_;
};

// A path given with --set resolves against the working directory; one written in a pipeline file
// against that file's project.
TEST(Config, SetIncludePathsAreRelativeToTheWorkingDirectory) {
  TempDir project, elsewhere;
  project.write("configs/data/a.json", R"({"n": 1})");
  const std::string file = project.write("pipelines/p.json", R"({
    "version": 1, "name": "p", "include": {"data": "configs/data/a.json"},
    "nodes": [{"id": "src", "type": "Count", "params": {"count": {"$ref": "data/n"}}}]})");
  elsewhere.write("mine/g1.json", R"({"n": 7})");
  InDirectory cwd(elsewhere.file("mine"));
  Diagnostics d(file);
  PipelineConfig config = load_pipeline_config(file, {{"include.data=g1.json"}}, d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(config.nodes[0].params, json({{"count", 7}}));
  EXPECT_EQ(config.include_files.at("data"), "g1.json");

  config = load_pipeline_config(file, {}, d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(config.nodes[0].params, json({{"count", 1}}));
}

// A missing include is one error, named at the --set that gave it; the $refs into it are not
// reported again and leave their nodes' params marked incomplete.
TEST(Config, AMissingIncludeIsOneError) {
  TempDir dir;
  const std::string file = dir.write("pipelines/p.json", R"({
    "version": 1, "name": "p", "include": {"data": "configs/data/a.json"},
    "nodes": [{"id": "src", "type": "Count", "params": {"count": {"$ref": "data/n"}}},
              {"id": "sink", "type": "Delay", "inputs": ["src"],
               "params": {"ms": {"$ref": "data/ms"}, "jitter": 1}}]})");
  InDirectory cwd(dir.path());
  Diagnostics d(file);
  PipelineConfig config = load_pipeline_config(file, {{"include.data=../newcomer/g1.json"}}, d);
  EXPECT_EQ(d.render(),
            "--set include.data=../newcomer/g1.json: included file "
            "../newcomer/g1.json does not exist\n");
  ASSERT_EQ(config.nodes.size(), 2u);
  EXPECT_TRUE(config.nodes[0].params_incomplete);
  EXPECT_TRUE(config.nodes[1].params_incomplete);

  Diagnostics written(file);
  config = load_pipeline_config(file, {}, written);
  EXPECT_EQ(written.render(),
            file + ":/include/data: included file configs/data/a.json does not exist\n");
}

TEST(Config, BadPatchesNameTheFileAndPointer) {
  TempDir dir;
  const std::string base = dir.write("pipelines/base.json", R"({
    "version": 1, "name": "base",
    "nodes": [{"id": "src", "type": "Count"}, {"id": "step", "type": "Delay", "inputs": ["src"]}]})");
  std::string file = dir.write("pipelines/p.json", R"({"extends": "base.json", "name": "p",
    "nodes": {"stpe": {"params": {}}, "src": 3, "decode": {}}})");
  Diagnostics d(file);
  PipelineConfig config = load_pipeline_config(file, {}, d);
  EXPECT_EQ(d.render(),
            file + ":/nodes/decode: no node \"decode\" in the base pipeline " + base +
                " (nodes: src, step)\n" + file +
                ":/nodes/src: a node patch is an object merged over the base's node, e.g. "
                "{\"params\": {\"mode\": \"eager\"}}\n" +
                file + ":/nodes/stpe: no node \"stpe\" in the base pipeline " + base +
                "; did you mean \"step\"? (nodes: src, step)\n");
  EXPECT_EQ(config.nodes.size(), 2u);  // the rest is still checked

  file = dir.write("pipelines/q.json", R"({"extends": "base.json", "name": "q",
    "nodes": [{"id": "src", "type": "Count"}]})");
  Diagnostics list(file);
  load_pipeline_config(file, {}, list);
  EXPECT_EQ(list.render(), file +
                               ":/nodes: in a pipeline that extends another, \"nodes\" maps node "
                               "ids of the base to patches, e.g. {\"step\": {\"params\": "
                               "{\"mode\": \"eager\"}}}\n");
}

TEST(Config, MissingBasesCyclesAndBadExtendsAreReported) {
  TempDir dir;
  const std::string a = dir.write("pipelines/a.json", R"({"extends": "b.json", "name": "a"})");
  const std::string b = dir.write("pipelines/b.json", R"({"extends": "./a.json", "name": "b"})");
  const std::string missing =
      dir.write("pipelines/m.json", R"({"extends": "../other/none.json", "name": "m"})");
  const std::string number = dir.write("pipelines/n.json", R"({"extends": 3, "name": "n"})");
  const std::string plain = dir.write("pipelines/plain.json", R"({"version": 1, "name": "plain",
    "nodes": [{"id": "src", "type": "Count"}]})");
  Diagnostics d(a);
  load_pipeline_config(a, {}, d);
  load_pipeline_config(missing, {}, d);
  load_pipeline_config(number, {}, d);
  load_pipeline_config(plain, {{"extends=a.json"}}, d);
  EXPECT_EQ(d.render(),
            b + ":/extends: extends cycle: " + a + " -> " + b + " -> " + a + "\n" + missing +
                ":/extends: base pipeline " + dir.file("other/none.json") + " does not exist\n" +
                number +
                ":/extends: \"extends\" names the pipeline file this one derives from, relative "
                "to this file's folder, e.g. \"robotwin_online.json\"\n" +
                plain +
                ":/extends: \"extends\" is followed before --set overrides apply; write it in "
                "the pipeline file\n");
}

TEST(Config, StructuralProblemsAreAllReported) {
  TempDir dir;
  std::string file = dir.write("p.json", R"({
    "version": 2, "nmae": "p",
    "nodes": [{"id": 3, "type": "Count", "inputz": []}, {"type": "X", "on_error": "ignore"}]})");
  Diagnostics d(file);
  load_pipeline_config(file, {}, d);
  EXPECT_EQ(d.render(),
            file +
                ":/nmae: unknown top-level key \"nmae\"; did you mean \"name\"? (allowed: "
                "version, name, description, include, settings, nodes)\n" +
                file + ":/version: unsupported version 2; expected 1\n" + file +
                ":/name: \"name\" must be a non-empty string\n" + file +
                ":/nodes/0/inputz: unknown node key \"inputz\"; did you mean \"inputs\"? "
                "(allowed: id, type, inputs, params, concurrency, on_error, description)\n" +
                file + ":/nodes/0/id: \"id\" must be a string\n" + file +
                ":/nodes/1/id: missing \"id\"\n" + file +
                ":/nodes/1/on_error: unknown on_error policy \"ignore\" (allowed: fail, skip)\n");
}

}  // namespace
}  // namespace wam
