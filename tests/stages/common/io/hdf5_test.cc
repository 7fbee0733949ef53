#include "common/io/hdf5.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "testing/expect_error.h"
#include "testing/temp_dir.h"

namespace wam::hdf5 {
namespace {

using testing::TempDir;

class Hdf5AttributeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    silence_errors();
    path_ = dir_.file("attributes.h5");
    file_ = H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(file_, 0);
  }
  void TearDown() override { H5Fclose(file_); }

  // A string attribute as the text cache wrote it before: fixed-length, null-padded, sized to
  // the text (one null byte for an empty text).
  void write_fixed_length(const std::string& name, const std::string& value) {
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
    H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attribute(
        H5Acreate2(file_, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
        H5Aclose);
    const std::string padded = value.empty() ? std::string(1, '\0') : value;
    ASSERT_GE(H5Awrite(attribute.get(), type.get(), padded.data()), 0);
  }

  TempDir dir_;
  std::string path_;
  hid_t file_ = -1;
};

TEST_F(Hdf5AttributeTest, WritesVariableLengthUtf8StringsAndReadsThemBack) {
  write_string_attribute(file_, "prompt", "pick up the cup \xc3\xa9", path_);
  write_string_attribute(file_, "empty", "", path_);
  EXPECT_EQ(read_string_attribute(file_, "prompt", path_), "pick up the cup \xc3\xa9");
  EXPECT_EQ(read_string_attribute(file_, "empty", path_), "");

  Handle attribute(H5Aopen(file_, "prompt", H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(attribute.get()), H5Tclose);
  EXPECT_GT(H5Tis_variable_str(type.get()), 0);
  EXPECT_EQ(H5Tget_cset(type.get()), H5T_CSET_UTF8);
}

TEST_F(Hdf5AttributeTest, ReadsTheOldFixedLengthEncoding) {
  write_fixed_length("encoder", "torchscript:sha256=ab12");
  write_fixed_length("empty", "");
  EXPECT_EQ(read_string_attribute(file_, "encoder", path_), "torchscript:sha256=ab12");
  EXPECT_EQ(read_string_attribute(file_, "empty", path_), "");
}

TEST_F(Hdf5AttributeTest, IntegersAbsenceAndWrongTypes) {
  write_int_attribute(file_, "text_dim", 2048, path_);
  write_string_attribute(file_, "name", "x", path_);
  EXPECT_EQ(read_int_attribute(file_, "text_dim", path_), 2048);
  EXPECT_EQ(read_int_attribute(file_, "missing", path_), std::nullopt);
  EXPECT_EQ(read_string_attribute(file_, "missing", path_), std::nullopt);
  EXPECT_ERROR(read_string_attribute(file_, "text_dim", path_),
               path_ + ": attribute text_dim is not a string");
  EXPECT_ERROR(read_int_attribute(file_, "name", path_),
               path_ + ": attribute name is not an integer");
}

}  // namespace
}  // namespace wam::hdf5
