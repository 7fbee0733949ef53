// cpu_first's choice between the CPU and NVDEC (data/cpu_decode_slots.h), on a stepped clock.
#include "data/cpu_decode_slots.h"

#include <gtest/gtest.h>

namespace wam::data {
namespace {

using Clock = CpuDecodeSlots::Clock;

Clock::time_point at(double seconds) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds)));
}

// Two slots, a 0.5 s average: saturated from t = 0, the share is 1 - exp(-t / 0.5), 0.75 at
// t = 0.693 s. A sample beyond the limit before then takes a slot of its own.
TEST(CpuDecodeSlotsTest, ABurstStaysOnTheCpuAndASaturatedCpuSpills) {
  CpuDecodeSlots slots;
  slots.reset(2, 0.5, at(0));
  EXPECT_FALSE(slots.spill(at(0)));
  EXPECT_FALSE(slots.spill(at(0)));
  EXPECT_FALSE(slots.spill(at(0.1)));   // share 0.18: a burst
  EXPECT_FALSE(slots.spill(at(0.65)));  // 0.73
  EXPECT_TRUE(slots.spill(at(0.75)));   // 0.78: every slot taken for most of the window
  EXPECT_TRUE(slots.spill(at(2.0)));
  // Back below the limit the CPU takes every sample however busy it was.
  slots.release(at(2.0));
  slots.release(at(2.0));
  slots.release(at(2.0));
  EXPECT_FALSE(slots.spill(at(2.0)));
  // One slot taken for 2 s: the share decays from about 0.98 to 0.02, so samples at and beyond
  // the limit stay on the CPU again.
  slots.release(at(2.0));
  EXPECT_FALSE(slots.spill(at(4.0)));
  EXPECT_FALSE(slots.spill(at(4.0)));
  EXPECT_FALSE(slots.spill(at(4.0)));
}

TEST(CpuDecodeSlotsTest, TheDefaultLimitIsAQuarterOfTheWorkerThreadsAndAtLeastOne) {
  EXPECT_EQ(CpuDecodeSlots::default_limit(16), 4);
  EXPECT_EQ(CpuDecodeSlots::default_limit(32), 8);
  EXPECT_EQ(CpuDecodeSlots::default_limit(7), 1);
  EXPECT_EQ(CpuDecodeSlots::default_limit(2), 1);
  EXPECT_EQ(CpuDecodeSlots::default_limit(1), 1);
}

TEST(CpuDecodeSlotsTest, AZeroWindowSpillsAsSoonAsEverySlotIsTaken) {
  CpuDecodeSlots slots;
  slots.reset(1, 0.0, at(0));
  EXPECT_FALSE(slots.spill(at(0)));
  EXPECT_TRUE(slots.spill(at(0)));
  EXPECT_TRUE(slots.spill(at(0)));
  slots.release(at(0.01));
  EXPECT_FALSE(slots.spill(at(0.01)));
}

}  // namespace
}  // namespace wam::data
