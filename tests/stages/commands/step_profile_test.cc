#include "commands/step_profile.h"

#include <gtest/gtest.h>

namespace wam::cli {
namespace {

TEST(StepProfile, TimeBeyondIsTheWholeGraphsTimePerStepLessThePartsMostFirst) {
  StepProfile whole;  // 4 steps
  whole.longest = {{"gemm", 400.0, 40},
                   {"nv12_to_rgb", 24.0, 96},
                   {"add", 20.0, 200},
                   {"copy", 8.0, 8},
                   {"softmax", 4.0, 4}};
  StepProfile part;  // 2 steps
  part.longest = {{"gemm", 198.0, 20}, {"add", 6.0, 60}, {"copy", 4.0, 4}, {"gelu", 2.0, 2}};
  const std::vector<KernelTime> beyond = time_beyond(whole, 4, part, 2);
  // gemm 100 - 99 = 1; nv12_to_rgb 6; add 5 - 3 = 2; copy 2 - 2 = 0 (left out); softmax 1; gelu
  // only in the part (left out).
  ASSERT_EQ(beyond.size(), 4u);
  EXPECT_EQ(beyond[0].name, "nv12_to_rgb");
  EXPECT_DOUBLE_EQ(beyond[0].total_ms, 6.0);
  EXPECT_EQ(beyond[0].calls, 24);
  EXPECT_EQ(beyond[1].name, "add");
  EXPECT_DOUBLE_EQ(beyond[1].total_ms, 2.0);
  EXPECT_EQ(beyond[1].calls, 20);  // 50 a step less 30
  // Equal times in name order.
  EXPECT_EQ(beyond[2].name, "gemm");
  EXPECT_DOUBLE_EQ(beyond[2].total_ms, 1.0);
  EXPECT_EQ(beyond[2].calls, 0);
  EXPECT_EQ(beyond[3].name, "softmax");
  EXPECT_DOUBLE_EQ(beyond[3].total_ms, 1.0);
  EXPECT_EQ(beyond[3].calls, 1);
}

TEST(StepProfile, TimeBeyondAnEmptyPartIsTheWholeGraphPerStep) {
  StepProfile whole;
  whole.longest = {{"a", 3.0, 3}, {"b", 9.0, 6}};
  const std::vector<KernelTime> beyond = time_beyond(whole, 3, StepProfile{}, 1);
  ASSERT_EQ(beyond.size(), 2u);
  EXPECT_EQ(beyond[0].name, "b");
  EXPECT_DOUBLE_EQ(beyond[0].total_ms, 3.0);
  EXPECT_EQ(beyond[0].calls, 2);
  EXPECT_EQ(beyond[1].name, "a");
  EXPECT_DOUBLE_EQ(beyond[1].total_ms, 1.0);
  EXPECT_EQ(beyond[1].calls, 1);
}

}  // namespace
}  // namespace wam::cli
