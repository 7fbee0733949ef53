#include "common/seeding.h"

#include <gtest/gtest.h>

namespace wam::seeding {
namespace {

// SplitMix64's published sequence from state 0: each output is the mix of the state after
// adding the increment once more, so splitmix64(k * increment) is the k + 1-th output.
TEST(SeedingTest, Splitmix64MatchesTheReferenceSequence) {
  constexpr uint64_t kIncrement = 0x9e3779b97f4a7c15ULL;
  EXPECT_EQ(splitmix64(0), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(splitmix64(kIncrement), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(splitmix64(2 * kIncrement), 0x06c45d188009454fULL);
}

TEST(SeedingTest, MixSeedMixesTheStreamBeforeCombining) {
  EXPECT_EQ(mix_seed(42, 7), splitmix64(42 ^ splitmix64(7)));
  EXPECT_NE(mix_seed(42, 7), mix_seed(7, 42));
  EXPECT_NE(mix_seed(42, 7), mix_seed(42, 8));
}

}  // namespace
}  // namespace wam::seeding
