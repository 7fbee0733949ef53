#include <gtest/gtest.h>

#include <torch/cuda.h>

#include "testing/expect_error.h"
#include "testing/stage_harness.h"
#include "wam/tensor.h"

namespace wam::testing {
namespace {

// Sample i: a float [2, 3] tensor filled with i, Int i, Double i / 2, Bool (i odd), String and
// Json.
Sample numbered_sample(int64_t i) {
  Sample sample("sample:" + std::to_string(i));
  sample.set_tensor("action", torch::full({2, 3}, static_cast<float>(i)));
  sample.set("sample_id", i);
  sample.set("weight", i / 2.0);
  sample.set("is_odd", i % 2 == 1);
  sample.set("prompt", std::string("task ") + std::to_string(i));
  sample.set("frame_plan", nlohmann::json{{"anchor", i}});
  return sample;
}

std::vector<Sample> numbered_samples(int64_t count) {
  std::vector<Sample> samples;
  for (int64_t i = 0; i < count; ++i) samples.push_back(numbered_sample(i));
  return samples;
}

std::string collate_error(const std::vector<Sample>& inputs) {
  return error_of([&] { run_stage("Collate", R"({"batch_size": 3})", inputs); });
}

TEST(CollateTest, StacksTensorsScalarsStringsAndJson) {
  auto batches = run_stage("Collate", R"({"batch_size": 2})", numbered_samples(5));
  ASSERT_EQ(batches.size(), 3u);
  const Sample& first = batches[0];
  EXPECT_EQ(first.key(), "batch:0");
  EXPECT_EQ(batches[2].key(), "batch:2");

  const auto& action = first.tensor("action");
  EXPECT_EQ(action.sizes(), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_TRUE(torch::equal(action[0], torch::zeros({2, 3})));
  EXPECT_TRUE(torch::equal(action[1], torch::ones({2, 3})));

  const auto& ids = batches[1].tensor("sample_id");
  EXPECT_EQ(ids.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(ids, torch::tensor({2, 3}, torch::kLong)));
  const auto& weights = batches[1].tensor("weight");
  EXPECT_EQ(weights.scalar_type(), torch::kDouble);
  EXPECT_TRUE(torch::equal(weights, torch::tensor({1.0, 1.5}, torch::kDouble)));
  const auto& odd = batches[1].tensor("is_odd");
  EXPECT_EQ(odd.scalar_type(), torch::kBool);
  EXPECT_TRUE(torch::equal(odd, torch::tensor({false, true})));

  EXPECT_EQ(batches[1].get_json("prompt"), (nlohmann::json{"task 2", "task 3"}));
  EXPECT_EQ(batches[1].get_json("frame_plan"), (nlohmann::json{{{"anchor", 2}}, {{"anchor", 3}}}));
  EXPECT_EQ(batches[1].get_json("sample_keys"), (nlohmann::json{"sample:2", "sample:3"}));

  // The last, partial batch is flushed by close().
  const Sample& last = batches[2];
  EXPECT_EQ(last.tensor("action").sizes(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(torch::equal(last.tensor("action")[0], torch::full({2, 3}, 4.0f)));
  EXPECT_TRUE(torch::equal(last.tensor("sample_id"), torch::tensor({4}, torch::kLong)));
  EXPECT_EQ(last.get_json("sample_keys"), (nlohmann::json{"sample:4"}));
}

// Augment's video_dtype uint8: the levels are stacked as they are, still uint8.
TEST(CollateTest, StacksUint8VideoUnchanged) {
  std::vector<Sample> samples;
  for (int64_t i = 0; i < 3; ++i) {
    Sample sample("sample:" + std::to_string(i));
    sample.set_tensor("video", torch::randint(0, 256, {3, 9, 8, 4}, torch::kUInt8));
    samples.push_back(std::move(sample));
  }
  auto batches = run_stage("Collate", R"({"batch_size": 3})", samples);
  ASSERT_EQ(batches.size(), 1u);
  const auto& video = batches[0].tensor("video");
  EXPECT_EQ(video.scalar_type(), torch::kUInt8);
  EXPECT_TRUE(
      torch::equal(video, torch::stack({samples[0].tensor("video"), samples[1].tensor("video"),
                                        samples[2].tensor("video")})));
}

TEST(CollateTest, DropLastDiscardsThePartialBatch) {
  auto batches =
      run_stage("Collate", R"({"batch_size": 2, "drop_last": true})", numbered_samples(5));
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1].get_json("sample_keys"), (nlohmann::json{"sample:2", "sample:3"}));
}

TEST(CollateTest, BatchSizeZeroTakesTheSettings) {
  HarnessOptions options;
  options.settings.batch_size = 3;
  auto batches = run_stage("Collate", "{}", numbered_samples(6), options);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].tensor("action").size(0), 3);
}

TEST(CollateTest, AHugeBatchNamesBatchSizeAndTheMemoryItNeeds) {
  // Once a c10::Error with a backtrace from LibTorch's allocator.
  Sample sample("sample:0");
  sample.set_tensor("video", torch::zeros({3, 9, 384, 256}, torch::kUInt8));
  HarnessOptions options;
  options.settings.batch_size = int64_t{1} << 50;
  EXPECT_EQ(error_of([&] { run_stage("Collate", "{}", {sample}, options); }),
            "Collate: field \"video\" needs a batch buffer of Byte[1125899906842624, 3, 9, 384, "
            "256] (more than 16 EiB) at settings.batch_size=1125899906842624, more than any "
            "machine's memory; lower batch_size (settings.max_in_flight, at least the batch size, "
            "bounds how many samples are held besides)");
  const std::string error = error_of(
      [&] { run_stage("Collate", R"({"batch_size": 1099511627776})", numbered_samples(1)); });
  const std::string expected_start =
      "Collate: field \"action\" needs a batch buffer of Float[1099511627776, 2, 3] (24.0 TiB) at "
      "batch_size=1099511627776, more than this machine's ";
  EXPECT_EQ(error.substr(0, expected_start.size()), expected_start) << error;
  EXPECT_NE(error.find(" of memory; lower batch_size"), std::string::npos) << error;
}

// Batches are made on the first sample's device (the GPU for Augment's outputs from device frames);
// `meta` stands in for a second device on a machine without one.
TEST(CollateTest, DeviceMismatchNamesFieldBothSamplesAndBothDevices) {
  auto inputs = numbered_samples(3);
  inputs[2].set_tensor("action", torch::zeros({2, 3}, torch::TensorOptions().device(at::kMeta)));
  EXPECT_EQ(collate_error(inputs),
            "Collate: field \"action\" is on meta in sample \"sample:2\" but on cpu in sample "
            "\"sample:0\" (batch 0); samples of a batch must have their tensors in host memory or "
            "on one GPU");
}

// VideoDecode's cpu_first decoder mixes host and GPU samples in a batch: the field is batched on
// the GPU whichever comes first, each row the sample's values.
TEST(CollateTest, HostAndGpuSamplesAreBatchedOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto inputs = numbered_samples(6);
  for (int64_t i : {1, 3, 4}) {
    inputs[static_cast<size_t>(i)].set_tensor(
        "action", torch::full({2, 3}, static_cast<float>(i), torch::Device(torch::kCUDA, 0)));
  }
  const auto batches = run_stage("Collate", R"({"batch_size": 3})", inputs);
  ASSERT_EQ(batches.size(), 2u);
  for (size_t b = 0; b < batches.size(); ++b) {
    const at::Tensor& action = batches[b].tensor("action");
    ASSERT_TRUE(action.is_cuda()) << "batch " << b;
    for (int64_t row = 0; row < 3; ++row) {
      const auto i = static_cast<float>(static_cast<int64_t>(b) * 3 + row);
      EXPECT_TRUE(torch::equal(action[row].cpu(), torch::full({2, 3}, i))) << b << " " << row;
    }
    EXPECT_TRUE(batches[b].tensor("sample_id").is_cpu());
  }
}

// After a GPU sample has moved a host column to the GPU, a third device is named against that
// sample, whose device the batch now has, not against the first (host) sample.
TEST(CollateTest, ThirdDeviceAfterAMoveNamesTheSampleThatMovedTheBatch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto inputs = numbered_samples(3);
  inputs[1].set_tensor("action", torch::zeros({2, 3}, torch::Device(torch::kCUDA, 0)));
  inputs[2].set_tensor("action", torch::zeros({2, 3}, torch::TensorOptions().device(at::kMeta)));
  EXPECT_EQ(collate_error(inputs),
            "Collate: field \"action\" is on meta in sample \"sample:2\" but on cuda:0 in sample "
            "\"sample:1\" (batch 0); samples of a batch must have their tensors in host memory or "
            "on one GPU");
}

TEST(CollateTest, ShapeMismatchNamesFieldBothSamplesAndBothShapes) {
  auto inputs = numbered_samples(3);
  inputs[1].set_tensor("action", torch::zeros({2, 4}));
  EXPECT_EQ(collate_error(inputs),
            "Collate: field \"action\" is Float[2, 4] in sample \"sample:1\" but Float[2, 3] in "
            "sample \"sample:0\" (batch 0); samples of a batch must have equal shapes");
}

TEST(CollateTest, FieldSetAndTypeMismatchesNameBothSamples) {
  auto missing = numbered_samples(3);
  missing[2].erase("weight");
  EXPECT_EQ(collate_error(missing),
            "Collate: sample \"sample:2\" lacks field \"weight\" that sample \"sample:0\" (batch "
            "0) has; samples of a batch must have the same fields");

  auto extra = numbered_samples(3);
  extra[1].set("extra", int64_t{1});
  EXPECT_EQ(collate_error(extra),
            "Collate: sample \"sample:1\" has field \"extra\" but sample \"sample:0\" (batch 0) "
            "does not; samples of a batch must have the same fields");

  auto retyped = numbered_samples(3);
  retyped[1].set("sample_id", std::string("one"));
  EXPECT_EQ(collate_error(retyped),
            "Collate: field \"sample_id\" is String in sample \"sample:1\" but Int in sample "
            "\"sample:0\" (batch 0)");
}

TEST(CollateTest, ReusesBuffersOnlyAfterDownstreamReleasesThem) {
  SteppedStage stage("Collate", R"({"batch_size": 2, "buffers": 1})");
  auto inputs = numbered_samples(8);

  EXPECT_TRUE(stage.process(inputs[0]).empty());
  std::vector<Sample> out = stage.process(inputs[1]);
  ASSERT_EQ(out.size(), 1u);
  const at::Tensor held = out[0].tensor("action");  // the test keeps batch 0
  const void* held_data = held.data_ptr();
  out.clear();

  stage.process(inputs[2]);
  out = stage.process(inputs[3]);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].tensor("action").data_ptr(), held_data);
  EXPECT_TRUE(torch::equal(held[1], torch::ones({2, 3}))) << "batch 0 was overwritten";
  EXPECT_TRUE(torch::equal(out[0].tensor("action")[1], torch::full({2, 3}, 3.0f)));
  out.clear();  // batch 1 released: the pooled buffer is free again

  stage.process(inputs[4]);
  out = stage.process(inputs[5]);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(torch::equal(held[0], torch::zeros({2, 3})));
  EXPECT_TRUE(torch::equal(held[1], torch::ones({2, 3})));

  // A partial batch is a view of a pooled buffer; holding it keeps that buffer busy too.
  EXPECT_TRUE(stage.process(inputs[6]).empty());
  const std::vector<Sample> partial = stage.close();
  ASSERT_EQ(partial.size(), 1u);
  EXPECT_EQ(partial[0].tensor("action").sizes(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(torch::equal(partial[0].tensor("action")[0], torch::full({2, 3}, 6.0f)));
  EXPECT_TRUE(torch::equal(out[0].tensor("action")[1], torch::full({2, 3}, 5.0f)));
  EXPECT_TRUE(torch::equal(held[1], torch::ones({2, 3})));
}

TEST(CollateTest, ReusesAFreedBufferInsteadOfAllocating) {
  SteppedStage stage("Collate", R"({"batch_size": 2, "buffers": 2})");
  auto inputs = numbered_samples(6);
  stage.process(inputs[0]);
  const void* first_data = stage.process(inputs[1]).at(0).tensor("action").data_ptr();
  stage.process(inputs[2]);
  const std::vector<Sample> out = stage.process(inputs[3]);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tensor("action").data_ptr(), first_data);
  EXPECT_TRUE(torch::equal(out[0].tensor("action")[0], torch::full({2, 3}, 2.0f)));
  // One buffer per batched field (action, sample_id, weight, is_odd), allocated once.
  EXPECT_EQ(stage.counter("buffer_allocations"), 4);
}

}  // namespace
}  // namespace wam::testing
