#include "common/capture_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace wam {
namespace {

TEST(CaptureGate, GpuWorkOfSeveralThreadsRunsTogether) {
  CaptureGate gate;
  const auto decoding = gate.gpu_work();
  std::atomic<bool> augmented{false};
  std::thread augment([&] {
    const auto work = gate.gpu_work();
    augmented = work.owns_lock();
  });
  augment.join();
  EXPECT_TRUE(augmented);
}

// The property the gate is built on (common/capture_gate.h): a capture waits for the work under
// way, and work that arrives while it waits queues behind it instead of starving it.
TEST(CaptureGate, ACaptureWaitsForWorkUnderWayAndHoldsBackNewWork) {
  CaptureGate gate;
  auto decoding = gate.gpu_work();
  std::atomic<bool> captured{false};
  std::thread step([&] {
    const auto alone = gate.capture();
    captured = true;
  });
  // Until the capture is waiting, new work still gets in; once it waits, none does.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (gate.try_gpu_work().owns_lock()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the capture never started waiting";
    std::this_thread::yield();
  }
  EXPECT_FALSE(captured) << "the capture ran beside GPU work";
  decoding.unlock();
  step.join();
  EXPECT_TRUE(captured);
  EXPECT_TRUE(gate.try_gpu_work().owns_lock()) << "the gate stayed closed after the capture";
}

}  // namespace
}  // namespace wam
