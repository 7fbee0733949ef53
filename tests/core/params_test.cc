#include "wam/params.h"

#include <gtest/gtest.h>

#include "wam/stage.h"

namespace wam {
namespace {

struct ExampleParams {
  std::string canvas = "vertical";
  bool deterministic = false;
  double brightness = 0.2;
  int64_t workers = 4;
  std::vector<std::string> cameras = {"cam_high"};
  std::vector<double> scale = {0.94, 1.0};
  template <class V>
  void visit(V& v) {
    v("canvas", canvas, "Camera layout.", OneOf{"vertical", "robotwin"});
    v("deterministic", deterministic, "Disable random transforms.");
    v("brightness", brightness, "Colour jitter strength.", Min{0.0}, Max{1.0});
    v("workers", workers, "Threads.", Min{1});
    v("cameras", cameras, "Cameras.", NonEmpty{});
    v("scale", scale, "Scale range.", Min{0.5});
  }
};

ExampleParams parse(const std::string& text, Diagnostics& d) {
  return parse_params<ExampleParams>(nlohmann::json::parse(text), "/nodes/2/params", d,
                                     "augment: Augment");
}

TEST(Params, ReadsEveryTypeAndKeepsDefaults) {
  Diagnostics d("p.json");
  auto p = parse(R"({"canvas": "robotwin", "brightness": 0.5, "workers": 8.0,
                     "cameras": ["a", "b"]})", d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(p.canvas, "robotwin");
  EXPECT_DOUBLE_EQ(p.brightness, 0.5);
  EXPECT_EQ(p.workers, 8);
  EXPECT_EQ(p.cameras, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(p.deterministic);
  EXPECT_EQ(p.scale, (std::vector<double>{0.94, 1.0}));
}

TEST(Params, ReportsEveryProblemWithPointer) {
  Diagnostics d("p.json");
  parse(R"({"canvas": "diagonal", "brightness": 2, "workers": 0.5, "deterministic": "yes",
            "cameras": [], "scale": [1.0, 0.25], "brightnes": 1})", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/2/params/canvas [augment: Augment]: unknown value \"diagonal\" "
            "(allowed: vertical, robotwin)\n"
            "p.json:/nodes/2/params/deterministic [augment: Augment]: expected bool, got string\n"
            "p.json:/nodes/2/params/brightness [augment: Augment]: must be <= 1, got 2\n"
            "p.json:/nodes/2/params/workers [augment: Augment]: expected int, got number\n"
            "p.json:/nodes/2/params/cameras [augment: Augment]: must not be empty\n"
            "p.json:/nodes/2/params/scale [augment: Augment]: must be >= 0.5, got 0.25\n"
            "p.json:/nodes/2/params/brightnes [augment: Augment]: unknown param \"brightnes\"; "
            "did you mean \"brightness\"? (allowed: canvas, deterministic, brightness, workers, "
            "cameras, scale)\n");
}

TEST(Params, ElementErrorsNameTheIndex) {
  Diagnostics d("p.json");
  parse(R"({"cameras": ["a", 3]})", d);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.items()[0].location, "/nodes/2/params/cameras");
  EXPECT_EQ(d.items()[0].message, "element 1: expected string, got int");
}

TEST(Params, NonObjectParamsAreAnError) {
  Diagnostics d("p.json");
  parse("[1, 2]", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/2/params [augment: Augment]: expected an object, got array\n");
}

TEST(Params, DescribeListsSchemaWithDefaults) {
  auto rows = describe_params<ExampleParams>();
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].name, "canvas");
  EXPECT_EQ(rows[0].type, "string");
  EXPECT_EQ(rows[0].default_value, "vertical");
  EXPECT_EQ(rows[0].constraints, "one of vertical|robotwin");
  EXPECT_EQ(rows[2].constraints, ">= 0, <= 1");
  EXPECT_EQ(rows[4].type, "string[]");
  EXPECT_EQ(rows[4].constraints, "non-empty");
  EXPECT_EQ(rows[5].default_value, nlohmann::json({0.94, 1.0}));
}

TEST(Params, EffectiveConfigRoundTrips) {
  Diagnostics d("p.json");
  auto p = parse(R"({"workers": 3})", d);
  nlohmann::json effective = params_to_json(p);
  EXPECT_EQ(effective["workers"], 3);
  EXPECT_EQ(effective["canvas"], "vertical");
  Diagnostics again("p.json");
  auto reparsed = parse_params<ExampleParams>(effective, "", again);
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(reparsed.workers, 3);
}

TEST(Params, SettingsRejectOutOfRangeValues) {
  Diagnostics d("p.json");
  parse_params<Settings>(nlohmann::json::parse(R"({"max_in_flight": 0, "device": "tpu"})"),
                         "/settings", d);
  EXPECT_EQ(d.render(),
            "p.json:/settings/max_in_flight: must be >= 1, got 0\n"
            "p.json:/settings/device: unknown value \"tpu\"; did you mean \"cpu\"? (allowed: auto, "
            "cpu, cuda)\n");
}

TEST(Suggest, OnlyPlausibleTyposAreSuggested) {
  EXPECT_EQ(closest_match("curent", {"current", "memory_anchor", "vlm"}), "current");
  EXPECT_EQ(closest_match("xyz", {"current", "memory_anchor"}), "");
  EXPECT_EQ(unknown_with_suggestion("cache field", "curent",
                                    {"current", "memory_anchor", "memory_recent", "vlm"}),
            "unknown cache field \"curent\"; did you mean \"current\"? (allowed: current, "
            "memory_anchor, memory_recent, vlm)");
}

}  // namespace
}  // namespace wam
