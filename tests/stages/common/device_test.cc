#include "common/device.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/expect_error.h"
#include "wam/error.h"

namespace wam {
namespace {

std::string resolved(const std::string& stage, const std::string& settings, bool cuda) {
  return resolve_device(stage, settings, cuda, "Stage").str();
}

std::string resolve_error(const std::string& stage, const std::string& settings) {
  return testing::error_of(
      [&] { resolve_device(stage, settings, /*cuda_available=*/false, "VaeEncode"); });
}

TEST(DeviceTest, StageAutoFollowsSettingsDevice) {
  EXPECT_EQ(resolved("auto", "cpu", /*cuda=*/true), "cpu");
  EXPECT_EQ(resolved("auto", "cuda", /*cuda=*/true), "cuda:0");
  EXPECT_EQ(resolved("auto", "cpu", /*cuda=*/false), "cpu");
}

TEST(DeviceTest, SettingsAutoMeansCudaWhenAvailable) {
  EXPECT_EQ(resolved("auto", "auto", /*cuda=*/true), "cuda:0");
  EXPECT_EQ(resolved("auto", "auto", /*cuda=*/false), "cpu");
}

TEST(DeviceTest, StageDeviceOverridesSettings) {
  EXPECT_EQ(resolved("cpu", "cuda", /*cuda=*/true), "cpu");
  EXPECT_EQ(resolved("cpu", "auto", /*cuda=*/true), "cpu");
  EXPECT_EQ(resolved("cuda", "cpu", /*cuda=*/true), "cuda:0");
}

TEST(DeviceTest, CudaWithoutCudaNamesWhatToChange) {
  const std::string from_settings = resolve_error("auto", "cuda");
  EXPECT_TRUE(
      from_settings.starts_with("VaeEncode: device \"cuda\" was requested but this LibTorch ("))
      << from_settings;
  EXPECT_TRUE(
      from_settings.ends_with(") sees no CUDA device; set settings.device to \"auto\" or \"cpu\""))
      << from_settings;
  const std::string from_param = resolve_error("cuda", "cpu");
  EXPECT_TRUE(
      from_param.ends_with(") sees no CUDA device; set param device to \"auto\" or \"cpu\""))
      << from_param;
}

}  // namespace
}  // namespace wam
