#include "wam/host_memory.h"

#include <sys/resource.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "wam/params.h"
#include "wam/stage.h"

namespace wam {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
// One 640x480 camera: an RGB frame, a sample's 11 frames, a decoder session (18 bytes a pixel).
constexpr int64_t kFrame = 640 * 480 * 3;
constexpr int64_t kSample = 11 * kFrame;
constexpr int64_t kSession = 18 * 640 * 480;

TEST(HostMemory, ParsesMemTotalAndCgroupLimits) {
  EXPECT_EQ(parse_meminfo_total("MemTotal:       24576000 kB\nMemFree:         1000 kB\n"),
            int64_t{24576000} * 1024);
  EXPECT_EQ(parse_meminfo_total("MemFree: 1000 kB\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_total("MemTotal: lots kB\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_total("XMemTotal: 5 kB\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_limit("2147483648\n"), 2147483648);
  EXPECT_EQ(parse_cgroup_limit("max\n"), std::nullopt);                  // v2: no limit
  EXPECT_EQ(parse_cgroup_limit("9223372036854771712\n"), std::nullopt);  // v1: no limit
  EXPECT_GT(machine_memory_bytes(), 0);  // this Linux machine has /proc/meminfo
}

TEST(HostMemory, AutoIsAThirtySecondOfTheMachineAndAtLeastHalfAGiB) {
  EXPECT_EQ(auto_host_memory_bytes(24 * kGiB), 3 * kGiB / 4);
  EXPECT_EQ(auto_host_memory_bytes(2048 * kGiB), 64 * kGiB);
  EXPECT_EQ(auto_host_memory_bytes(4 * kGiB), kGiB / 2);
  EXPECT_EQ(auto_host_memory_bytes(0), kGiB / 2);  // memory unknown
}

TEST(HostMemory, SamplesThatFitStayBetweenTheLeastAndTheSettingsLimit) {
  EXPECT_EQ(HostMemoryBudget::samples_that_fit(100, 10, 5, 50), 10);
  EXPECT_EQ(HostMemoryBudget::samples_that_fit(109, 10, 5, 50), 10);  // whole samples only
  EXPECT_EQ(HostMemoryBudget::samples_that_fit(1000, 10, 5, 50), 50);
  EXPECT_EQ(HostMemoryBudget::samples_that_fit(30, 10, 5, 50), 5);
  EXPECT_EQ(HostMemoryBudget::samples_that_fit(-5, 10, 5, 50), 5);   // claims over the budget
  EXPECT_EQ(HostMemoryBudget::samples_that_fit(100, 0, 5, 50), 50);  // size not known
  EXPECT_EQ(HostMemoryBudget::samples_that_fit(100, 10, 60, 50), 50);
}

TEST(HostMemory, ClaimsAndSamplesShareTheBudget) {
  // The online run of docs/BENCHMARKS.md on 2 threads: batch 16, auto max_in_flight 68.
  HostMemoryBudget budget(512 * kMiB, "settings.host_memory_gib", 20, 68, 2);
  EXPECT_EQ(budget.in_flight_limit(), 20);  // until a sample's size is known
  // Each claim may take half of what is left: 256 MiB holds all 8 sessions...
  EXPECT_EQ(budget.claim("decoder sessions", kSession, 8, 2), 8);
  // ... and the next half all 192 frames.
  EXPECT_EQ(budget.claim("cached frames", kFrame, 192, 22), 192);
  budget.observe_sample(kSample / 2);
  budget.observe_sample(kSample);
  budget.observe_sample(kSample / 4);  // the largest seen counts
  EXPECT_EQ(budget.in_flight_limit(), 20);
  EXPECT_TRUE(budget.settle());
  EXPECT_FALSE(budget.settle());
  // (512 MiB - 8 x 5.27 MiB - 192 x 0.88 MiB) / 9.67 MiB = 31.1
  EXPECT_EQ(budget.in_flight_limit(), 31);
  EXPECT_EQ(budget.start_line(),
            "host memory budget 512 MiB (settings.host_memory_gib): up to 31 samples of 9.67 MiB "
            "in flight, 8 decoder sessions (42.2 MiB), 192 cached frames (169 MiB)");
  // A claim after the start (HostToDevice's first batch) lowers the limit.
  EXPECT_EQ(budget.claim("pinned staging buffers", 16 * kSample, 4, 1), 1);
  // 15 would fit: the least the graph needs wins.
  EXPECT_EQ(budget.in_flight_limit(), 20);
}

TEST(HostMemory, ATightBudgetGrantsWhatFitsButNeverLessThanTheLeast) {
  HostMemoryBudget budget(64 * kMiB, "settings.host_memory_gib", 20, 68, 2);
  EXPECT_EQ(budget.claim("cached frames", kFrame, 192, 22), 36);   // 32 MiB / 0.88 MiB
  EXPECT_EQ(budget.claim("decoder sessions", kSession, 8, 2), 3);  // 16 MiB / 5.27 MiB
  // A buffer larger than the budget: the least is granted all the same.
  EXPECT_EQ(budget.claim("pinned staging buffers", 16 * kSample, 4, 1), 1);
  budget.observe_sample(kSample);
  budget.settle();
  EXPECT_EQ(budget.in_flight_limit(), 20);
  EXPECT_EQ(budget.start_line(),
            "host memory budget 64.0 MiB (settings.host_memory_gib): up to 20 samples of 9.67 MiB "
            "in flight (the least the graph needs: over budget), 36 cached frames (31.6 MiB), 3 "
            "decoder sessions (15.8 MiB), 1 pinned staging buffers (155 MiB)");
}

TEST(HostMemory, SmallSamplesKeepTheSettingsLimit) {
  HostMemoryBudget budget(kGiB, "settings.host_memory_gib", 18, 40, 1);
  budget.settle();
  EXPECT_EQ(budget.in_flight_limit(), 40);
  EXPECT_EQ(budget.start_line(),
            "host memory budget 1.00 GiB (settings.host_memory_gib): up to 40 samples in flight "
            "(settings.max_in_flight's limit)");
}

TEST(HostMemory, SettingIsANonNegativeNumberOfGiB) {
  Diagnostics d("p.json");
  Settings settings =
      parse_params<Settings>(nlohmann::json::parse(R"({"host_memory_gib": -0.5})"), "/settings", d);
  EXPECT_EQ(d.render(), "p.json:/settings/host_memory_gib: must be >= 0, got -0.5\n");
  Diagnostics typed("p.json");
  parse_params<Settings>(nlohmann::json::parse(R"({"host_memory_gib": "2G"})"), "/settings", typed);
  EXPECT_EQ(typed.render(), "p.json:/settings/host_memory_gib: expected number, got string\n");
  Diagnostics ok("p.json");
  settings =
      parse_params<Settings>(nlohmann::json::parse(R"({"host_memory_gib": 1.5})"), "/settings", ok);
  EXPECT_TRUE(ok.empty());
  EXPECT_EQ(settings.host_memory_gib, 1.5);
  EXPECT_EQ(Settings().host_memory_gib, 0);  // auto
  const HostMemoryBudget set = HostMemoryBudget::for_settings(1.5, 20, 68, 2);
  EXPECT_EQ(set.bytes(), 3 * kGiB / 2);
  const HostMemoryBudget automatic = HostMemoryBudget::for_settings(0, 20, 68, 2);
  EXPECT_EQ(automatic.bytes(), auto_host_memory_bytes(machine_memory_bytes()));
}

// A block above glibc's largest dynamic mmap threshold (32 MiB), freed and asked for again: by
// default mapped afresh, so every page faults again; kept in the heap, it is reused. Minor page
// faults of this thread count the difference.
TEST(HostMemory, SampleBuffersAreReusedFromTheHeapWithoutPageFaults) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator stands in for glibc's malloc";
#endif
  if (std::getenv("GLIBC_TUNABLES") != nullptr) GTEST_SKIP() << "GLIBC_TUNABLES is set";
  ASSERT_TRUE(keep_sample_buffers_in_the_heap());
  constexpr size_t kBytes = size_t{40} << 20, kPage = 4096;
  const auto faults_touching_a_block = [] {
    rusage before{}, after{};
    getrusage(RUSAGE_THREAD, &before);
    auto* block = static_cast<volatile char*>(std::malloc(kBytes));
    for (size_t i = 0; i < kBytes; i += kPage) block[i] = static_cast<char>(i);
    std::free(const_cast<char*>(block));
    getrusage(RUSAGE_THREAD, &after);
    return after.ru_minflt - before.ru_minflt;
  };
  faults_touching_a_block();
  const long again = faults_touching_a_block();
  EXPECT_LT(again, static_cast<long>(kBytes / kPage / 10))
      << "a 40 MiB block was mapped afresh: " << again << " page faults";
}

}  // namespace
}  // namespace wam
