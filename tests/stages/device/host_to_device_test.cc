// HostToDevice: CPU pass-through (uint8 video normalised on the host), and (CUDA only) pageable
// and pinned copies, uint8 video and the pool as flow-control token.
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "device/transfer_timing.h"
#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/tensor.h"

namespace wam {
namespace {

Sample make_batch(int64_t seed) {
  torch::manual_seed(seed);
  Sample batch("batch:" + std::to_string(seed));
  batch.set_tensor("video", torch::rand({2, 3, 9, 16, 8}) * 2 - 1);
  batch.set_tensor("action", torch::randn({2, 32, 80}));
  batch.set_tensor("action_is_pad", torch::rand({2, 32}) > 0.5);
  batch.set_tensor("vlm_current_images", torch::randint(0, 256, {2, 2, 3, 8, 8}, torch::kByte));
  batch.set_tensor("sample_id", torch::tensor({seed, seed + 1}, torch::kLong));
  batch.set("prompt", nlohmann::json::array({"pick", "place"}));
  return batch;
}

// The batch with its video as Augment's video_dtype uint8 writes it: the levels HostToDevice's
// video_as_uint8 made of the float video.
Sample with_video_levels(const Sample& batch) {
  Sample levels = batch;
  levels.set_tensor(
      "video", batch.tensor("video").add(1.0).mul(127.5).round().clamp(0, 255).to(torch::kUInt8));
  return levels;
}

using testing::SteppedStage;

// Runs the stage as node "h2d", the name its log lines carry.
testing::HarnessOptions h2d_node() {
  testing::HarnessOptions options;
  options.node_id = "h2d";
  return options;
}

// Waits until the thread `tid` of this process sleeps in the kernel (state S in its /proc stat).
void wait_until_asleep(pid_t tid) {
  const std::string stat = "/proc/self/task/" + std::to_string(tid) + "/stat";
  for (;;) {
    std::ifstream in(stat);
    const std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t name_end = line.rfind(')');  // the state follows the "(name)" field
    if (name_end != std::string::npos && line.compare(name_end, 3, ") S") == 0) return;
    std::this_thread::yield();
  }
}

TEST(HostToDeviceTest, PassesThroughOnCpuAndSaysSoOnce) {
  SteppedStage h2d("HostToDevice", R"({"mode": "pinned", "device": "cpu"})", h2d_node());
  for (int64_t i = 0; i < 3; ++i) {
    const Sample in = make_batch(i);
    const Sample out = h2d.process_one(in);
    EXPECT_EQ(out.key(), in.key());
    EXPECT_EQ(out.fields().size(), in.fields().size());
    for (const char* name : {"video", "action", "action_is_pad", "vlm_current_images"}) {
      EXPECT_EQ(out.tensor(name).data_ptr(), in.tensor(name).data_ptr()) << name;
    }
    EXPECT_EQ(out.get_json("prompt"), in.get_json("prompt"));
  }
  EXPECT_EQ(h2d.log(), std::vector<std::string>{
                           "[h2d] HostToDevice: the training device is cpu; batches pass through "
                           "unchanged (uint8 video is normalised to float)"});
  EXPECT_EQ(h2d.counter("bytes_copied"), 0);
  EXPECT_FALSE(h2d.has_counter("copy_us"));  // nothing is copied, so nothing is timed
}

TEST(HostToDeviceTest, NormalisesUint8VideoOnCpuAsTheGpuDoes) {
  for (const char* params : {R"({"mode": "pinned", "video_as_uint8": true, "device": "cpu"})",
                             R"({"mode": "pageable", "device": "cpu"})"}) {
    SCOPED_TRACE(params);
    SteppedStage h2d("HostToDevice", params, h2d_node());
    const Sample as_float = make_batch(3);
    const Sample in = with_video_levels(as_float);
    const at::Tensor levels = in.tensor("video").clone();
    const Sample out = h2d.process_one(in);
    const at::Tensor& video = out.tensor("video");
    ASSERT_EQ(video.scalar_type(), torch::kFloat);
    ASSERT_EQ(video.sizes(), in.tensor("video").sizes());
    // What the device path computes from the levels (a float copy, / 127.5, - 1), here on the host.
    EXPECT_TRUE(torch::equal(video, levels.to(torch::kFloat).div_(127.5).sub_(1.0)));
    EXPECT_LE((video - as_float.tensor("video")).abs().max().item<double>(), 0.5 / 127.5 + 1e-6);
    EXPECT_TRUE(torch::equal(in.tensor("video"), levels));  // the received tensor is left alone
    for (const char* name : {"action", "action_is_pad", "vlm_current_images"}) {
      EXPECT_EQ(out.tensor(name).data_ptr(), in.tensor(name).data_ptr()) << name;
    }
    EXPECT_EQ(h2d.counter("bytes_copied"), 0);
  }
}

TEST(HostToDeviceTest, CudaRequestedWithoutCudaIsAnError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has CUDA";
  const std::string error = testing::error_of(
      [] { SteppedStage h2d("HostToDevice", R"({"device": "cuda"})", h2d_node()); });
  EXPECT_EQ(error.rfind("HostToDevice: device \"cuda\" was requested but this LibTorch (", 0), 0u)
      << error;
}

void expect_arrived_intact(const Sample& in, const Sample& out, bool video_as_uint8) {
  for (const char* name : {"action", "action_is_pad", "vlm_current_images", "sample_id"}) {
    ASSERT_TRUE(out.tensor(name).is_cuda()) << name;
    EXPECT_TRUE(torch::equal(out.tensor(name).cpu(), in.tensor(name))) << name;
  }
  const at::Tensor video = out.tensor("video");
  ASSERT_TRUE(video.is_cuda());
  EXPECT_EQ(video.scalar_type(), at::kFloat);
  const double error = (video.cpu() - in.tensor("video")).abs().max().item<double>();
  if (video_as_uint8) {
    EXPECT_LE(error, 0.5 / 127.5 + 1e-6);  // one uint8 level
  } else {
    EXPECT_EQ(error, 0.0);
  }
  EXPECT_EQ(out.get_json("prompt"), in.get_json("prompt"));
}

TEST(HostToDeviceCudaTest, PageableCopiesArriveIntact) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SteppedStage h2d("HostToDevice", R"({"mode": "pageable"})", h2d_node());
  const Sample in = make_batch(1);
  expect_arrived_intact(in, h2d.process_one(in), false);
  EXPECT_GT(h2d.counter("bytes_copied"), 0);
  // Blocking copies share the step's stream: no staging or event-timed copy figures.
  EXPECT_FALSE(h2d.has_counter("staging_us"));
  EXPECT_FALSE(h2d.has_counter("copy_us"));
}

TEST(HostToDeviceCudaTest, PinnedCopiesArriveIntactThroughRecycledBuffers) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (bool as_uint8 : {false, true}) {
    SteppedStage h2d("HostToDevice",
                     std::string(R"({"mode": "pinned", "pool_batches": 2, "video_as_uint8": )") +
                         (as_uint8 ? "true" : "false") + "}",
                     h2d_node());
    int64_t expected_bytes = 0;
    for (int64_t i = 0; i < 6; ++i) {  // three passes over the two buffers
      const Sample in = make_batch(i);
      const Sample out = h2d.process_one(in);
      expect_arrived_intact(in, out, as_uint8);
      for (const auto& [name, value] : in.fields()) {
        if (type_of(value) != FieldType::kTensor) continue;
        const at::Tensor& t = in.tensor(name);
        expected_bytes += (as_uint8 && name == "video") ? t.numel() : int64_t(t.nbytes());
      }
    }
    EXPECT_EQ(h2d.counter("bytes_copied"), expected_bytes);
    EXPECT_EQ(h2d.counter("pool_waits"), 0);
    EXPECT_TRUE(h2d.has_counter("staging_us"));
    EXPECT_GT(h2d.counter("copy_us"), 0);  // six batches' copies, timed by CUDA events
    // What `bench` reads from the stage after the run: its own totals of the same times.
    const stages::TransferTiming timing =
        dynamic_cast<const stages::TimedTransfer&>(h2d.stage()).transfer_timing();
    EXPECT_TRUE(timing.event_timed);
    EXPECT_EQ(timing.staging_us, h2d.counter("staging_us"));
    EXPECT_EQ(timing.copy_us, h2d.counter("copy_us"));
    EXPECT_EQ(timing.pool_wait_us, 0);
    EXPECT_EQ(timing.device_wait_us, h2d.counter("device_wait_us"));
  }
}

// uint8 video from Augment gives the very floats that video_as_uint8 gave for the float video, and
// crosses as the same bytes, whether video_as_uint8 is on or not.
TEST(HostToDeviceCudaTest, Uint8VideoArrivesAsTheHostQuantisedFloatVideoDid) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string mode : {"pageable", "pinned"}) {
    SCOPED_TRACE(mode);
    SteppedStage quantising("HostToDevice",
                            R"({"video_as_uint8": true, "mode": ")" + mode + R"("})", h2d_node());
    SteppedStage copying("HostToDevice", R"({"video_as_uint8": true, "mode": ")" + mode + R"("})",
                         h2d_node());
    SteppedStage copying_without_flag("HostToDevice", R"({"mode": ")" + mode + R"("})", h2d_node());
    for (int64_t i = 0; i < 3; ++i) {
      const Sample in = make_batch(i);
      const at::Tensor expected = quantising.process_one(in).tensor("video").cpu();
      for (SteppedStage* h2d : {&copying, &copying_without_flag}) {
        const Sample out = h2d->process_one(with_video_levels(in));
        expect_arrived_intact(in, out, true);
        EXPECT_TRUE(torch::equal(out.tensor("video").cpu(), expected));
      }
    }
    EXPECT_EQ(copying.counter("bytes_copied"), quantising.counter("bytes_copied"));
    EXPECT_EQ(copying_without_flag.counter("bytes_copied"), quantising.counter("bytes_copied"));
  }
}

// Fields Augment made on the GPU pass through uncopied; uint8 video there is normalised as host
// levels are.
TEST(HostToDeviceCudaTest, DeviceFieldsPassThroughAndDeviceVideoLevelsAreNormalised) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (const std::string mode : {"pageable", "pinned"}) {
    SCOPED_TRACE(mode);
    SteppedStage from_host("HostToDevice", R"({"mode": ")" + mode + R"("})", h2d_node());
    SteppedStage on_device("HostToDevice", R"({"mode": ")" + mode + R"("})", h2d_node());
    const Sample in = with_video_levels(make_batch(4));
    Sample resident = in;
    for (const char* name : {"video", "vlm_current_images"}) {
      resident.set_tensor(name, in.tensor(name).to(torch::kCUDA));
    }
    const Sample want = from_host.process_one(in);
    const Sample got = on_device.process_one(resident);
    EXPECT_TRUE(got.tensor("vlm_current_images").is_same(resident.tensor("vlm_current_images")));
    EXPECT_EQ(got.tensor("video").scalar_type(), at::kFloat);
    EXPECT_TRUE(torch::equal(got.tensor("video").cpu(), want.tensor("video").cpu()));
    EXPECT_EQ(on_device.counter("bytes_copied"), from_host.counter("bytes_copied") -
                                                     in.tensor("video").nbytes() -
                                                     in.tensor("vlm_current_images").nbytes());
  }
}

TEST(HostToDeviceCudaTest, PinnedPoolIsTheFlowControlToken) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SteppedStage h2d("HostToDevice", R"({"mode": "pinned", "pool_batches": 1})", h2d_node());
  std::optional<Sample> held = h2d.process_one(make_batch(1));
  Sample second_batch = make_batch(2);
  std::atomic<pid_t> second_tid{0};
  std::atomic<bool> done{false};
  std::thread second([&] {
    second_tid = gettid();
    h2d.process_one(std::move(second_batch));
    done = true;
  });
  while (second_tid == 0) std::this_thread::yield();
  // Nothing before the pool's wait sleeps: once asleep, process() is waiting for a buffer (as
  // pool_waits confirms below), and it cannot return while the only buffer is held.
  wait_until_asleep(second_tid);
  EXPECT_FALSE(done.load()) << "process() must wait while the only buffer is held downstream";
  held.reset();  // the step consumed the batch: its buffer returns to the pool
  second.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(h2d.counter("pool_waits"), 1);
}

TEST(HostToDeviceCudaTest, PinnedPoolGrowsForALargerBatch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  SteppedStage h2d("HostToDevice", R"({"mode": "pinned", "pool_batches": 1})", h2d_node());
  h2d.process_one(make_batch(1));
  Sample larger = make_batch(2);
  larger.set_tensor("action", torch::randn({2, 64, 80}));
  const Sample out = h2d.process_one(larger);
  EXPECT_TRUE(torch::equal(out.tensor("action").cpu(), larger.tensor("action")));
  bool logged = false;
  for (const auto& line : h2d.log()) {
    logged = logged || line.find("growing that buffer") != std::string::npos;
  }
  EXPECT_TRUE(logged);
}

}  // namespace
}  // namespace wam
