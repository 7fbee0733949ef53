// The harness's checks: a test stage that breaks its declared contract fails the test, with a
// message naming the stage, the sample key, the field and the types; error_of and EXPECT_ERROR fail
// a test whose call throws nothing or another message.
#include "testing/stage_harness.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include "testing/expect_error.h"

namespace wam::testing {
namespace {

struct ContractBreakerParams {
  std::string emits = "declared";

  template <class V>
  void visit(V& v) {
    v("emits", emits, "Which output to emit.",
      OneOf{"declared", "undeclared", "wrong_type", "missing", "unchanged"});
  }
};

// Declares: removes "scratch", writes "out" (Int). `emits` says how it keeps that promise.
class ContractBreakerStage final : public Stage {
 public:
  static constexpr std::string_view kType = "ContractBreaker";
  static constexpr std::string_view kSummary = "Test stage: breaks its contract as asked.";
  using Params = ContractBreakerParams;
  explicit ContractBreakerStage(Params p) : p_(std::move(p)) {}

  void declare(Contract& c) const override {
    c.removes("scratch");
    c.writes("out", FieldType::kInt);
  }

  void process(Sample s, Emitter& out) override {
    if (p_.emits != "unchanged") s.erase("scratch");
    if (p_.emits == "declared" || p_.emits == "undeclared") s.set("out", int64_t{1});
    if (p_.emits == "undeclared") s.set("extra", 2.5);
    if (p_.emits == "wrong_type") s.set("out", std::string("one"));
    out.emit(std::move(s));
  }

 private:
  Params p_;
};

HarnessOptions breaker_options(bool passes_some_through = false) {
  static const StageRegistry registry = [] {
    StageRegistry r;
    r.add<ContractBreakerStage>();
    return r;
  }();
  HarnessOptions options;
  options.registry = &registry;
  options.passes_some_through = passes_some_through;
  return options;
}

Sample input() {
  Sample s("sample:7");
  s.set("value", int64_t{3});
  s.set("scratch", std::string("dropped"));
  return s;
}

std::vector<Sample> run_breaker(const std::string& emits, bool passes_some_through = false) {
  return run_stage("ContractBreaker", R"({"emits": ")" + emits + R"("})", {input()},
                   breaker_options(passes_some_through));
}

TEST(StageHarnessContract, DeclaredOutputPasses) {
  const auto out = run_breaker("declared");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].get_int("out"), 1);
  EXPECT_FALSE(out[0].has("scratch"));
}

TEST(StageHarnessContract, UndeclaredFieldFails) {
  EXPECT_NONFATAL_FAILURE(run_breaker("undeclared"),
                          "ContractBreaker emitted sample \"sample:7\" with field \"extra\" "
                          "(Double), which is neither an input field nor a declared write");
}

TEST(StageHarnessContract, WrongTypeFails) {
  EXPECT_NONFATAL_FAILURE(run_breaker("wrong_type"),
                          "ContractBreaker emitted sample \"sample:7\" with field \"out\" as "
                          "String, but it is Int (a declared write)");
}

TEST(StageHarnessContract, MissingDeclaredWriteFails) {
  EXPECT_NONFATAL_FAILURE(run_breaker("missing"),
                          "ContractBreaker emitted sample \"sample:7\" without field \"out\" (Int, "
                          "a declared write)");
}

// What the check reports for `output` emitted from input().
std::vector<std::string> violations(const Sample& output, bool passes_some_through) {
  const auto stage = make_stage("ContractBreaker", "{}", *breaker_options().registry);
  ContractCheck check("ContractBreaker", *stage, passes_some_through);
  check.fed(input());
  return check.violations(output);
}

TEST(StageHarnessContract, RemovedFieldKeptFails) {
  Sample kept = input();
  kept.set("out", int64_t{1});
  EXPECT_EQ(violations(kept, false),
            std::vector<std::string>{
                "ContractBreaker emitted sample \"sample:7\" with field \"scratch\" (String), "
                "which is neither an input field nor a declared write"});
}

// A stage that passes a sample through unchanged may leave out its writes, but only with the
// opt-in, and only when the sample is exactly its input.
TEST(StageHarnessContract, UnchangedSampleIsAcceptedOnlyWhenTheStagePassesSomeThrough) {
  const auto out = run_breaker("unchanged", /*passes_some_through=*/true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].get_string("scratch"), "dropped");
  EXPECT_EQ(violations(input(), false),
            (std::vector<std::string>{
                "ContractBreaker emitted sample \"sample:7\" with field \"scratch\" (String), "
                "which is neither an input field nor a declared write",
                "ContractBreaker emitted sample \"sample:7\" without field \"out\" (Int, a "
                "declared write)"}));
  Sample retyped = input();
  retyped.set("value", 3.0);
  EXPECT_EQ(violations(retyped, true).size(), 3u);  // value's type, scratch kept, out missing
  EXPECT_NONFATAL_FAILURE(run_breaker("missing", /*passes_some_through=*/true),
                          "ContractBreaker emitted sample \"sample:7\" without field \"out\" (Int, "
                          "a declared write)");
}

TEST(StageHarnessContract, SteppedStageChecksEachOutput) {
  SteppedStage stage("ContractBreaker", R"({"emits": "undeclared"})", breaker_options());
  EXPECT_NONFATAL_FAILURE(stage.process(input()), "with field \"extra\" (Double)");
  EXPECT_TRUE(stage.close().empty());
}

TEST(StageHarnessContract, BatchingStageTypesInputFieldsAsABatch) {
  Sample a("sample:0"), b("sample:1");
  for (Sample* s : {&a, &b}) {
    s->set("episode_index", int64_t{4});
    s->set("task", std::string("wipe"));
    s->set("frame_plan", nlohmann::json::object());
  }
  const auto out = run_stage("Collate", R"({"batch_size": 2})", {a, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].type("task"), FieldType::kJson);
  EXPECT_EQ(out[0].type("frame_plan"), FieldType::kJson);
  EXPECT_EQ(out[0].type("episode_index"), FieldType::kTensor);
}

TEST(ExpectError, ACallThatThrowsNothingFails) {
  EXPECT_NONFATAL_FAILURE(EXPECT_EQ(error_of([] {}), ""),
                          "expected an exception, but the call returned normally");
  EXPECT_NONFATAL_FAILURE(EXPECT_ERROR(throw Error("other text"), "the text"), "other text");
  EXPECT_ERROR(throw Error("the text"), "the text");
}

}  // namespace
}  // namespace wam::testing
