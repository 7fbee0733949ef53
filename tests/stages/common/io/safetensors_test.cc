// The safetensors reader and writer: round trips bit for bit, the header's layout as the format
// defines it (checked by an independent Python reader, and by Python's `safetensors` package where
// it is installed), and the exact refusal of damaged or hostile files.
#include "common/io/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "wam/error.h"

namespace wam {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("wam_safetensors_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_file(const std::string& name, const std::vector<st::TensorData>& tensors,
                         const std::map<std::string, std::string>& metadata = {}) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    st::write(tensors, metadata, [&](std::string_view bytes) {
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    });
    return path;
  }
  // A file of an 8-byte length, then `header` as given, then `data`.
  std::string raw_file(const std::string& name, const std::string& header,
                       const std::string& data = "", int64_t claimed_length = -1) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    const uint64_t length = claimed_length >= 0 ? claimed_length : header.size();
    out.write(reinterpret_cast<const char*>(&length), 8);
    out << header << data;
    return path;
  }
  std::string error_of(const std::string& path) {
    try {
      st::Reader reader(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsEveryDtypeBitForBit) {
  const std::vector<float> f32 = {1.5f, -0.0f, 3.4e38f, 1e-45f, -2.25f, 7.0f};
  const std::vector<uint16_t> bf16 = {0x3fc0, 0x8000, 0x7f80, 0x0001};
  const std::vector<int64_t> i64 = {INT64_MIN, -1, 0, INT64_MAX};
  const std::vector<uint8_t> u8 = {0, 255, 7};
  const std::vector<double> f64 = {3.141592653589793};
  const std::string path = write_file("all.safetensors",
                                      {{"weights.f32", st::DType::kF32, {2, 3}, f32.data()},
                                       {"bf16", st::DType::kBF16, {4}, bf16.data()},
                                       {"step", st::DType::kI64, {2, 2}, i64.data()},
                                       {"bytes", st::DType::kU8, {3}, u8.data()},
                                       {"empty", st::DType::kF16, {0, 5}, nullptr},
                                       {"scalar", st::DType::kF64, {}, f64.data()}},
                                      {{"format", "pt"}, {"config", "{\"layers\": 2}"}});
  uint64_t header_length = 0;
  std::ifstream(path, std::ios::binary).read(reinterpret_cast<char*>(&header_length), 8);
  EXPECT_EQ(header_length % 8, 0u);  // padded with spaces, as the reference writer does
  EXPECT_EQ(fs::file_size(path), 8 + header_length + 24 + 8 + 32 + 3 + 0 + 8);
  const st::Reader reader(path);
  ASSERT_EQ(reader.tensors().size(), 6u);
  EXPECT_EQ(reader.metadata().at("config"), "{\"layers\": 2}");
  EXPECT_EQ(reader.metadata().at("format"), "pt");
  const st::TensorInfo* w = reader.find("weights.f32");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, st::DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->begin, 0);
  EXPECT_EQ(w->bytes(), 24);
  std::vector<float> f32_back(6);
  reader.read(*w, f32_back.data());
  EXPECT_EQ(std::memcmp(f32_back.data(), f32.data(), 24), 0);
  std::vector<int64_t> i64_back(4);
  reader.read(*reader.find("step"), i64_back.data());
  EXPECT_EQ(i64_back, i64);
  std::vector<uint16_t> bf16_back(4);
  reader.read(*reader.find("bf16"), bf16_back.data());
  EXPECT_EQ(bf16_back, bf16);
  EXPECT_EQ(reader.find("empty")->bytes(), 0);
  EXPECT_EQ(reader.find("scalar")->shape, std::vector<int64_t>{});
  EXPECT_EQ(reader.find("absent"), nullptr);
}

// An independent reader (Python's standard library: struct + json) sees the layout the format
// defines; Python's `safetensors` package, where installed, reads the same values.
TEST_F(SafetensorsTest, PythonReadsWhatWeWrite) {
  const std::vector<float> values = {0.5f, -1.0f, 2.0f, 1024.0f};
  const std::vector<int64_t> ids = {3, 1, 4};
  const std::string path = write_file("py.safetensors",
                                      {{"b.values", st::DType::kF32, {2, 2}, values.data()},
                                       {"a.ids", st::DType::kI64, {3}, ids.data()}},
                                      {{"note", "made by wam"}});
  const std::string script = (dir_ / "read.py").string();
  std::ofstream(script) << R"(import json, struct, sys
raw = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
out = {'metadata': header.pop('__metadata__')}
for name, t in sorted(header.items()):
    b, e = t['data_offsets']
    fmt = {'F32': 'f', 'I64': 'q'}[t['dtype']]
    out[name] = [t['dtype'], t['shape'], list(struct.unpack('<%d%s' % ((e - b) // struct.calcsize(fmt), fmt), data[b:e]))]
try:
    from safetensors import safe_open
    with safe_open(sys.argv[1], framework='numpy') as f:
        out['package'] = {k: f.get_tensor(k).reshape(-1).tolist() for k in sorted(f.keys())}
except ImportError:
    out['package'] = None
print(json.dumps(out))
)";
  const std::string output = (dir_ / "out.json").string();
  const std::string command = "/usr/bin/python3 " + script + " " + path + " > " + output;
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const nlohmann::json read = nlohmann::json::parse(std::ifstream(output));
  EXPECT_EQ(read["metadata"], nlohmann::json({{"note", "made by wam"}}));
  EXPECT_EQ(read["b.values"],
            nlohmann::json::parse(R"(["F32", [2, 2], [0.5, -1.0, 2.0, 1024.0]])"));
  EXPECT_EQ(read["a.ids"], nlohmann::json::parse(R"(["I64", [3], [3, 1, 4]])"));
  if (read["package"].is_null()) {
    GTEST_SKIP() << "Python's safetensors package is not installed (the stdlib reader passed)";
  }
  EXPECT_EQ(read["package"]["a.ids"], nlohmann::json({3, 1, 4}));
  EXPECT_EQ(read["package"]["b.values"], nlohmann::json({0.5, -1.0, 2.0, 1024.0}));
}

TEST_F(SafetensorsTest, RefusesDamagedFilesNamingTheProblem) {
  const std::string ok_header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');
  {
    const std::string path = (dir_ / "short").string();
    std::ofstream(path) << "abc";
    EXPECT_EQ(error_of(path), path +
                                  ": not a safetensors file: it is 3 bytes, shorter than the "
                                  "8-byte header length");
  }
  {
    const std::string path = raw_file("truncated", ok_header, data, 5000);
    EXPECT_EQ(error_of(path), path +
                                  ": not a safetensors file: its header length 5000 runs past "
                                  "the end of the file (70 bytes)");
  }
  {
    const std::string path = raw_file("huge", ok_header, data, int64_t{1} << 40);
    EXPECT_EQ(error_of(path), path +
                                  ": not a safetensors file: a header of 1099511627776 bytes is "
                                  "over the format's limit of 100000000");
  }
  {
    const std::string path = raw_file("past", ok_header, "1234");
    EXPECT_EQ(error_of(path), path +
                                  ": safetensors header: tensor \"w\": data_offsets [0,8] run "
                                  "past the end of the data (4 bytes)");
  }
  {
    const std::string path =
        raw_file("dtype", R"({"w":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", data);
    EXPECT_EQ(error_of(path), path +
                                  ": safetensors header: tensor \"w\": unknown dtype \"F8_E4M3\"; "
                                  "known: BOOL, U8, I8, I16, I32, I64, F16, BF16, F32, F64");
  }
  {
    const std::string path = raw_file(
        "twice",
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
        data);
    EXPECT_EQ(error_of(path), path + ": safetensors header: tensor \"w\" is named twice");
  }
  {
    const std::string path =
        raw_file("size", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data);
    EXPECT_EQ(error_of(path), path +
                                  ": safetensors header: tensor \"w\": shape [3] of F32 needs 12 "
                                  "bytes, data_offsets give 8");
  }
  {
    const std::string path =
        raw_file("gap", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data);
    EXPECT_EQ(error_of(path), path + ": safetensors header: data bytes 0 to 4 belong to no tensor");
  }
  {
    const std::string path = raw_file(
        "overlap",
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
        data);
    EXPECT_EQ(error_of(path), path + ": safetensors header: tensors \"a\" and \"b\" overlap");
  }
  {
    const std::string path = raw_file("json", "{\"w\": [", data);
    EXPECT_EQ(error_of(path).rfind(path + ": safetensors header: header is not valid JSON: ", 0),
              0u)
        << error_of(path);
  }
  {
    const std::string path =
        raw_file("negative", R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data);
    EXPECT_EQ(error_of(path), path +
                                  ": safetensors header: tensor \"w\": \"shape\" must hold sizes "
                                  "(integers >= 0), got [-2]");
  }
  EXPECT_EQ(error_of((dir_ / "absent").string()),
            (dir_ / "absent").string() + ": cannot open: No such file or directory");
}

TEST_F(SafetensorsTest, WriterRefusesDuplicateNames) {
  const float value = 1;
  try {
    write_file("dup", {{"x", st::DType::kF32, {1}, &value}, {"x", st::DType::kF32, {1}, &value}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "safetensors: tensor \"x\" is named twice");
  }
}

}  // namespace
}  // namespace wam
