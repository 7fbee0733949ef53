#include "wam/params.h"

#include <gtest/gtest.h>

#include "wam/config.h"
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
                     "cameras": ["a", "b"]})",
                 d);
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
            "cameras": [], "scale": [1.0, 0.25], "brightnes": 1})",
        d);
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
  parse_params<Settings>(nlohmann::json::parse(R"({"max_in_flight": -1, "device": "tpu"})"),
                         "/settings", d);
  EXPECT_EQ(d.render(),
            "p.json:/settings/max_in_flight: must be >= 0, got -1\n"
            "p.json:/settings/device: unknown value \"tpu\"; did you mean \"cpu\"? (allowed: auto, "
            "cpu, cuda)\n");
}

TEST(Params, AutoMaxInFlightIsFourBatchesAndTwoSamplesPerWorker) {
  Settings settings;
  settings.batch_size = 16;
  EXPECT_EQ(settings.max_in_flight, 0);  // auto is the default
  EXPECT_EQ(settings.in_flight_limit(2), 4 * 16 + 2 * 2);
  EXPECT_EQ(settings.in_flight_limit(16), 4 * 16 + 2 * 16);
  settings.max_in_flight = 5;  // a value set is kept as it is
  EXPECT_EQ(settings.in_flight_limit(16), 5);
}

enum class Layout { kVertical, kRobotwin };
constexpr auto enum_names(Layout) {
  return std::array{EnumName{Layout::kVertical, "vertical"},
                    EnumName{Layout::kRobotwin, "robotwin"}};
}

struct RangeParams {
  double low = 0.0;
  double high = 1.0;
  template <class V>
  void visit(V& v) {
    v("low", low, "Lower end.");
    v("high", high, "Upper end.", Max{10.0});
  }
  void check(ParamChecker& c) const {
    c.require(
        low <= high, "high",
        "must be >= low (" + detail::format_number(low) + "), got " + detail::format_number(high));
  }
};

struct LayeredParams {
  Layout layout = Layout::kVertical;
  RangeParams range;
  RangeParams required_range;
  int64_t depth = 2;
  int64_t width = 4;
  template <class V>
  void visit(V& v) {
    v("layout", layout, "Camera layout.");
    v("range", range, "A nested range.");
    v("required_range", required_range, "A nested range that must be given.", NonEmpty{});
    v("depth", depth, "Layers.", Min{1});
    v("width", width, "Units.", Min{1});
  }
  void check(ParamChecker& c) const {
    c.require(depth % 2 == 0, "depth", "must be even, got " + std::to_string(depth));
    c.require(width >= depth, "width",
              "must be >= depth (" + std::to_string(depth) + "), got " + std::to_string(width));
  }
};

LayeredParams parse_layered(const std::string& text, Diagnostics& d) {
  return parse_params<LayeredParams>(nlohmann::json::parse(text), "/nodes/5/params", d,
                                     "step: TrainStep");
}

TEST(ParamEnums, ParseTheirStrings) {
  Diagnostics d("p.json");
  auto p = parse_layered(R"({"layout": "robotwin", "required_range": {"low": 1}})", d);
  EXPECT_TRUE(d.empty()) << d.render();
  EXPECT_EQ(p.layout, Layout::kRobotwin);
  EXPECT_EQ(enum_name(p.layout), "robotwin");
}

TEST(ParamEnums, UnknownValuesGetADidYouMeanAndTheAllowedList) {
  Diagnostics d("p.json");
  parse_layered(R"({"layout": "robotwn", "required_range": {"low": 1}})", d);
  parse_layered(R"({"layout": 1, "required_range": {"low": 1}})", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/5/params/layout [step: TrainStep]: unknown value \"robotwn\"; did you "
            "mean \"robotwin\"? (allowed: vertical, robotwin)\n"
            "p.json:/nodes/5/params/layout [step: TrainStep]: expected string, got int\n");
}

TEST(ParamEnums, OnErrorUsesTheEnumParser) {
  OnError policy = OnError::kFail;
  EXPECT_EQ(enum_from_json(nlohmann::json("skip"), policy, "on_error policy"), std::nullopt);
  EXPECT_EQ(policy, OnError::kSkip);
  EXPECT_EQ(enum_from_json(nlohmann::json("skp"), policy, "on_error policy"),
            "unknown on_error policy \"skp\"; did you mean \"skip\"? (allowed: fail, skip)");
}

TEST(ParamEnums, DescribeAndEffectiveConfigUseTheStrings) {
  auto rows = describe_params<LayeredParams>();
  EXPECT_EQ(rows[0].name, "layout");
  EXPECT_EQ(rows[0].type, "string");
  EXPECT_EQ(rows[0].default_value, "vertical");
  EXPECT_EQ(rows[0].constraints, "one of vertical|robotwin");

  Diagnostics d("p.json");
  auto p = parse_layered(R"({"layout": "robotwin", "required_range": {"low": 1}})", d);
  const nlohmann::json effective = params_to_json(p);
  EXPECT_EQ(effective["layout"], "robotwin");
  Diagnostics again("p.json");
  EXPECT_EQ(parse_params<LayeredParams>(effective, "", again).layout, Layout::kRobotwin);
  EXPECT_TRUE(again.empty()) << again.render();
}

TEST(NestedParams, ErrorsCarryTheNestedPointer) {
  Diagnostics d("p.json");
  parse_layered(R"({"range": {"high": 11, "hihg": 2}, "required_range": {"low": "x"}})", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/5/params/range/high [step: TrainStep]: must be <= 10, got 11\n"
            "p.json:/nodes/5/params/range/hihg [step: TrainStep]: unknown param \"hihg\"; did "
            "you mean \"high\"? (allowed: low, high)\n"
            "p.json:/nodes/5/params/required_range/low [step: TrainStep]: expected number, got "
            "string\n");
}

TEST(NestedParams, RequiredAndObjectOnly) {
  Diagnostics d("p.json");
  parse_layered(R"({"range": [1, 2]})", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/5/params/range [step: TrainStep]: expected an object, got array\n"
            "p.json:/nodes/5/params/required_range [step: TrainStep]: must not be empty\n");
}

TEST(NestedParams, DescribedAsDottedRowsAndDumpedNested) {
  auto rows = describe_params<LayeredParams>();
  ASSERT_EQ(rows.size(), 9u);
  EXPECT_EQ(rows[1].name, "range");
  EXPECT_EQ(rows[1].type, "object");
  EXPECT_EQ(rows[1].doc, "A nested range.");
  EXPECT_EQ(rows[2].name, "range.low");
  EXPECT_EQ(rows[3].name, "range.high");
  EXPECT_EQ(rows[3].type, "number");
  EXPECT_EQ(rows[3].default_value, 1.0);
  EXPECT_EQ(rows[3].constraints, "<= 10");
  EXPECT_EQ(rows[4].name, "required_range");
  EXPECT_EQ(rows[4].constraints, "non-empty");
  EXPECT_EQ(rows[6].name, "required_range.high");

  Diagnostics d("p.json");
  auto p = parse_layered(R"({"range": {"high": 3}, "required_range": {"low": 0.5}})", d);
  ASSERT_TRUE(d.empty()) << d.render();
  EXPECT_DOUBLE_EQ(p.range.high, 3.0);
  const nlohmann::json effective = params_to_json(p);
  EXPECT_EQ(effective["range"], nlohmann::json({{"low", 0.0}, {"high", 3.0}}));
  EXPECT_EQ(effective["required_range"], nlohmann::json({{"low", 0.5}, {"high", 1.0}}));
}

TEST(ParamChecks, EveryRuleIsReportedAtItsField) {
  Diagnostics d("p.json");
  parse_layered(R"({"depth": 3, "width": 2, "required_range": {"low": 1}})", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/5/params/depth [step: TrainStep]: must be even, got 3\n"
            "p.json:/nodes/5/params/width [step: TrainStep]: must be >= depth (3), got 2\n");
}

TEST(ParamChecks, NestedRulesReportTheNestedPointer) {
  Diagnostics d("p.json");
  parse_layered(R"({"range": {"low": 2, "high": 1}, "required_range": {"low": 1}})", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/5/params/range/high [step: TrainStep]: must be >= low (2), got 1\n");
}

TEST(ParamChecks, RulesWaitUntilEveryFieldIsValid) {
  // depth is odd, but width is not a number, and then a nested field breaks its own rule: the
  // struct's rules, which may read any field, are not run on such values.
  Diagnostics d("p.json");
  parse_layered(R"({"depth": 3, "width": "wide", "required_range": {"low": 1}})", d);
  parse_layered(R"({"depth": 3, "required_range": {"low": 2, "high": 1}})", d);
  EXPECT_EQ(d.render(),
            "p.json:/nodes/5/params/width [step: TrainStep]: expected int, got string\n"
            "p.json:/nodes/5/params/required_range/high [step: TrainStep]: must be >= low (2), "
            "got 1\n");
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
