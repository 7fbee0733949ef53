// The Parquet reader and writer: real LeRobot files (values as hyparquet reads them), round trips
// through the writer in every layout it writes, every refusal with its message, damaged files,
// and our files read back by hyparquet under node.
#include "formats/parquet/parquet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "formats/parquet/codecs.h"
#include "formats/parquet/encodings.h"
#include "formats/parquet/parquet_format.h"
#include "testing/hyparquet.h"

namespace wam::parquet {
namespace {

namespace fs = std::filesystem;
namespace fmt = format;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kGr00t = WAM_SOURCE_DIR "/../shared/data/lerobot-gr00t-picknplace";

std::string episode_path(int episode) {
  char name[64];
  std::snprintf(name, sizeof(name), "/data/chunk-000/episode_%06d.parquet", episode);
  return kGr00t + name;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

class ParquetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    dir_ = fs::temp_directory_path() / ("wam_parquet_" + std::to_string(::getpid()) + "_" + name);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// Real files: the GR00T LeRobot v2.0 sample, written by Arrow through HF datasets.

class RealFiles : public ParquetTest {
 protected:
  void SetUp() override {
    if (!fs::exists(episode_path(0))) {
      GTEST_SKIP() << "the GR00T sample is absent (" << kGr00t << ")";
    }
    ParquetTest::SetUp();
  }
};

TEST_F(RealFiles, RowCountsEqualEpisodesJsonl) {
  std::ifstream episodes(kGr00t + "/meta/episodes.jsonl");
  std::string line;
  int checked = 0;
  while (std::getline(episodes, line)) {
    const nlohmann::json e = nlohmann::json::parse(line);
    const std::string path = episode_path(e["episode_index"].get<int>());
    if (!fs::exists(path)) continue;
    EXPECT_EQ(ParquetFile::open(path).num_rows(), e["length"].get<int64_t>()) << path;
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

TEST_F(RealFiles, Schema) {
  const ParquetFile f = ParquetFile::open(episode_path(0));
  EXPECT_EQ(f.num_rows(), 416);
  EXPECT_EQ(f.num_row_groups(), 1);
  EXPECT_THAT(f.created_by(), StartsWith("parquet-cpp-arrow"));
  std::vector<std::string> described;
  for (const ColumnInfo& c : f.columns()) {
    described.push_back(c.name + " " + name_of(c.type) + (c.is_list ? " list" : "") +
                        (c.unsupported.empty() ? "" : " unsupported"));
  }
  EXPECT_THAT(described,
              ::testing::ElementsAre(
                  "observation.state DOUBLE list", "action DOUBLE list", "timestamp DOUBLE",
                  "annotation.human.action.task_description INT64", "task_index INT64",
                  "annotation.human.validity INT64", "episode_index INT64", "index INT64",
                  "next.reward DOUBLE", "next.done BOOLEAN"));
  EXPECT_EQ(f.column("observation.state")->logical_type, "");
  EXPECT_EQ(f.column("observation"), nullptr);
}

// Expected values below were read with hyparquet 1.33 (npm), an independent reader.
TEST_F(RealFiles, ValuesOfChosenRows) {
  const ParquetFile e0 = ParquetFile::open(episode_path(0));
  const ColumnValues<double> state = e0.read_doubles("observation.state");
  ASSERT_EQ(state.rows, 416);
  ASSERT_EQ(state.width, 44);
  ASSERT_EQ(state.values.size(), 416u * 44);
  EXPECT_EQ(state.values[0], -0.01147082911843003);
  EXPECT_EQ(state.values[1], 0.1220796682445753);
  EXPECT_EQ(state.values[43], 0.0);
  EXPECT_EQ(state.values[100 * 44 + 7], 6.398235076672701e-05);
  EXPECT_EQ(state.values[415 * 44 + 0], 0.023337920829725196);
  EXPECT_EQ(state.values[415 * 44 + 2], -0.01040474692498294);
  const ColumnValues<double> action = e0.read_doubles("action");
  EXPECT_EQ(action.values[415 * 44 + 1], 0.024705212556392197);
  EXPECT_EQ(action.values[200 * 44 + 10], -1.5);
  const ColumnValues<float> action32 = e0.read_floats("action");
  EXPECT_EQ(action32.values[415 * 44 + 1], static_cast<float>(0.024705212556392197));

  const ColumnValues<double> timestamp = e0.read_doubles("timestamp");
  EXPECT_EQ(timestamp.width, 1);
  EXPECT_EQ(timestamp.values.front(), 0.04999995231628418);
  EXPECT_EQ(timestamp.values.back(), 20.79998016357422);
  const ColumnValues<int64_t> done = e0.read_ints("next.done");
  EXPECT_EQ(std::count(done.values.begin(), done.values.end(), 1), 1);
  EXPECT_EQ(done.values.back(), 1);
  EXPECT_EQ(e0.read_doubles("next.reward").values.back(), 1.0);

  const ParquetFile e1 = ParquetFile::open(episode_path(1));
  const ColumnValues<int64_t> index = e1.read_ints("index");
  EXPECT_EQ(index.values.front(), 416);
  EXPECT_EQ(index.values[237], 653);
  EXPECT_EQ(index.values.back(), 885);
  EXPECT_EQ(e1.read_ints("task_index").values[0], 2);
  EXPECT_EQ(e1.read_ints("episode_index").values[469], 1);
  EXPECT_EQ(e1.read_doubles("timestamp").values[237], 11.899988651275635);
  const ColumnValues<double> a1 = e1.read_doubles("action", {200, 1});
  EXPECT_EQ(a1.rows, 1);
  EXPECT_EQ(a1.values[0], 0.021403358117205028);
  EXPECT_EQ(a1.values[1], 0.04993543195516653);
  EXPECT_EQ(a1.values[2], 0.018928223093377168);
  EXPECT_EQ(e1.read_doubles("observation.state", {469, 1}).values[5], -0.07765651012467162);

  const ParquetFile e4 = ParquetFile::open(episode_path(4));
  EXPECT_EQ(e4.num_rows(), 328);
  EXPECT_EQ(e4.read_ints("index").values.back(), 2095);
  EXPECT_EQ(e4.read_doubles("observation.state", {0, 1}).values[1], 0.06227776165613408);
}

TEST_F(RealFiles, RangesEqualTheFullRead) {
  const ParquetFile f = ParquetFile::open(episode_path(2));
  const ColumnValues<float> all = f.read_floats("observation.state");
  for (const RowRange range :
       {RowRange{0, 1}, RowRange{17, 100}, RowRange{469, 1}, RowRange{300, -1}, RowRange{470, 0}}) {
    const ColumnValues<float> part = f.read_floats("observation.state", range);
    const int64_t count = range.count < 0 ? 470 - range.first : range.count;
    ASSERT_EQ(part.rows, count);
    ASSERT_EQ(part.width, 44);
    EXPECT_TRUE(
        std::equal(part.values.begin(), part.values.end(), all.values.begin() + range.first * 44));
  }
}

// ---------------------------------------------------------------------------------------------
// Round trips through the writer.

// The columns of a LeRobot-like table, with repeats (for dictionaries) and awkward values.
struct Table {
  int64_t rows = 0;
  std::vector<float> state;            // width 7, FLOAT
  std::vector<double> action;          // width 3, DOUBLE
  std::vector<float> state_as_double;  // width 2, written as DOUBLE
  std::vector<double> timestamp;
  std::vector<int64_t> index, episode, done, mask;  // mask: a LIST of BOOLEAN, width 4
  std::vector<int64_t> small;                       // INT32, with its extremes
  std::vector<std::string> task;

  explicit Table(int64_t n) : rows(n) {
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < 7; ++j) {
        state.push_back(j == 6 ? 0.0f : static_cast<float>(std::sin(0.37 * i + j)));
      }
      for (int j = 0; j < 3; ++j) action.push_back(j == 0 ? -0.0 : (i % 11) * 0.25 - j * 1e-300);
      state_as_double.push_back(static_cast<float>(i) / 3.0f);
      state_as_double.push_back(-1e30f);
      timestamp.push_back(i / 20.0);
      index.push_back(1000000000000LL + i);
      episode.push_back(i / 37);
      done.push_back(i % 5 == 4);
      for (int j = 0; j < 4; ++j) mask.push_back((i + j) % 3 == 0);
      small.push_back(i == 0 ? INT32_MIN : i == 1 ? INT32_MAX : i % 7 - 3);
      task.push_back(i % 4 == 0 ? "" : i % 4 == 1 ? "pick the pear" : "put it on the plate, é 中");
    }
  }

  void write(const std::string& path, const WriteOptions& options) const {
    ParquetWriter w(path, options);
    w.add_floats("observation.state", state, 7);
    w.add_doubles("action", action, 3);
    w.add_floats("state.f64", state_as_double, 2, PhysicalType::kDouble);
    w.add_doubles("timestamp", timestamp);
    w.add_ints("index", index);
    w.add_ints("episode_index", episode, 0, PhysicalType::kInt32);
    w.add_ints("next.done", done, 0, PhysicalType::kBoolean);
    w.add_ints("mask", mask, 4, PhysicalType::kBoolean);
    w.add_ints("small", small, 0, PhysicalType::kInt32);
    w.add_strings("task", task);
    w.write();
  }

  template <class T>
  static std::vector<T> slice(const std::vector<T>& v, int64_t width, RowRange r) {
    return std::vector<T>(v.begin() + r.first * width, v.begin() + (r.first + r.count) * width);
  }

  // Reads rows `r` back and compares every value.
  void expect_equal(const ParquetFile& f, RowRange r) const {
    SCOPED_TRACE("rows " + std::to_string(r.first) + "+" + std::to_string(r.count));
    const ColumnValues<float> s = f.read_floats("observation.state", r);
    EXPECT_EQ(s.rows, r.count);
    EXPECT_EQ(s.width, 7);
    EXPECT_EQ(s.values, slice(state, 7, r));
    const ColumnValues<double> a = f.read_doubles("action", r);
    EXPECT_EQ(a.width, 3);
    EXPECT_EQ(a.values, slice(action, 3, r));
    for (size_t i = 0; i < a.values.size(); ++i) {
      EXPECT_EQ(std::signbit(a.values[i]), std::signbit(slice(action, 3, r)[i]));
    }
    EXPECT_EQ(f.read_floats("state.f64", r).values, slice(state_as_double, 2, r));
    EXPECT_EQ(f.read_doubles("timestamp", r).values, slice(timestamp, 1, r));
    EXPECT_EQ(f.read_ints("index", r).values, slice(index, 1, r));
    EXPECT_EQ(f.read_ints("episode_index", r).values, slice(episode, 1, r));
    EXPECT_EQ(f.read_ints("next.done", r).values, slice(done, 1, r));
    const ColumnValues<int64_t> m = f.read_ints("mask", r);
    EXPECT_EQ(m.width, 4);
    EXPECT_EQ(m.values, slice(mask, 4, r));
    EXPECT_EQ(f.read_ints("small", r).values, slice(small, 1, r));
    const ColumnValues<std::string> t = f.read_strings("task", r);
    EXPECT_EQ(t.width, 1);
    EXPECT_EQ(t.values, slice(task, 1, r));
  }
};

struct Layout {
  Codec codec;
  bool dictionary;
  int page_version;
};

std::string layout_name(const ::testing::TestParamInfo<Layout>& info) {
  return std::string(name_of(info.param.codec)) + (info.param.dictionary ? "_dict" : "_plain") +
         "_v" + std::to_string(info.param.page_version);
}

std::vector<Layout> all_layouts() {
  std::vector<Layout> out;
  for (Codec codec : {Codec::kUncompressed, Codec::kSnappy, Codec::kGzip, Codec::kZstd}) {
    for (bool dictionary : {false, true}) {
      for (int version : {1, 2}) out.push_back({codec, dictionary, version});
    }
  }
  return out;
}

class RoundTrip : public ParquetTest, public ::testing::WithParamInterface<Layout> {
 protected:
  WriteOptions options() const {
    WriteOptions o;
    o.codec = GetParam().codec;
    o.dictionary = GetParam().dictionary;
    o.data_page_version = GetParam().page_version;
    return o;
  }
};

TEST_P(RoundTrip, OnePagePerChunk) {
  const Table table(123);
  table.write(file("t.parquet"), options());
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  EXPECT_EQ(f.num_rows(), 123);
  EXPECT_EQ(f.num_row_groups(), 1);
  EXPECT_EQ(f.created_by(), "wam-pipeline");
  table.expect_equal(f, {0, 123});
}

TEST_P(RoundTrip, SeveralPagesAndRowGroups) {
  const Table table(123);
  WriteOptions o = options();
  o.page_rows = 7;
  o.row_group_rows = 50;
  table.write(file("t.parquet"), o);
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  EXPECT_EQ(f.num_row_groups(), 3);
  table.expect_equal(f, {0, 123});
  table.expect_equal(f, {45, 30});   // across the first boundary
  table.expect_equal(f, {49, 52});   // the last row of a group to the first of the third
  table.expect_equal(f, {100, 23});  // the last group alone
  table.expect_equal(f, {122, 1});
  table.expect_equal(f, {50, 0});
}

INSTANTIATE_TEST_SUITE_P(Layouts, RoundTrip, ::testing::ValuesIn(all_layouts()), layout_name);

TEST_F(ParquetTest, ColumnsDescribeWhatWasWritten) {
  Table(3).write(file("t.parquet"), {});
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  std::vector<std::string> described;
  for (const ColumnInfo& c : f.columns()) {
    described.push_back(c.name + " " + name_of(c.type) + (c.is_list ? " list" : "") +
                        (c.logical_type.empty() ? "" : " " + c.logical_type));
  }
  EXPECT_THAT(described,
              ::testing::ElementsAre("observation.state FLOAT list", "action DOUBLE list",
                                     "state.f64 DOUBLE list", "timestamp DOUBLE", "index INT64",
                                     "episode_index INT32", "next.done BOOLEAN",
                                     "mask BOOLEAN list", "small INT32", "task BYTE_ARRAY STRING"));
}

// Reads the page headers of every column chunk: the encodings of its data pages, in order.
std::vector<std::vector<int32_t>> page_encodings(const std::string& path) {
  const std::string data = read_bytes(path);
  const auto* bytes = reinterpret_cast<const uint8_t*>(data.data());
  const uint32_t footer = load_le<uint32_t>(bytes + data.size() - 8);
  const fmt::FileMetaData meta =
      fmt::decode_file_metadata(bytes + data.size() - 8 - footer, footer);
  std::vector<std::vector<int32_t>> out;
  for (const fmt::RowGroup& rg : meta.row_groups) {
    for (const fmt::ColumnChunk& c : rg.columns) {
      const fmt::ColumnMetaData& m = *c.meta_data;
      std::vector<int32_t> encodings;
      size_t pos = static_cast<size_t>(m.dictionary_page_offset.value_or(m.data_page_offset));
      const size_t end = pos + static_cast<size_t>(m.total_compressed_size);
      while (pos < end) {
        size_t header = 0;
        const fmt::PageHeader h = fmt::decode_page_header(bytes + pos, end - pos, header);
        if (h.data_page_header) encodings.push_back(h.data_page_header->encoding);
        if (h.data_page_header_v2) encodings.push_back(h.data_page_header_v2->encoding);
        pos += header + static_cast<size_t>(h.compressed_page_size);
      }
      out.push_back(encodings);
    }
  }
  return out;
}

TEST_F(ParquetTest, DictionaryFallsBackToPlainPagesPastItsLimit) {
  // As Arrow does once a dictionary passes 1 MiB: here 200 bytes, 25 distinct doubles.
  std::vector<double> values;
  for (int i = 0; i < 300; ++i) values.push_back(i * 0.5);
  for (int version : {1, 2}) {
    WriteOptions o;
    o.dictionary = true;
    o.dictionary_page_limit = 200;
    o.page_rows = 20;
    o.data_page_version = version;
    ParquetWriter w(file("t.parquet"), o);
    w.add_doubles("x", values);
    w.write();
    const auto encodings = page_encodings(file("t.parquet"));
    ASSERT_EQ(encodings.size(), 1u);
    EXPECT_THAT(encodings[0],
                ::testing::ElementsAre(fmt::kRleDictionary, fmt::kRleDictionary, fmt::kPlain,
                                       fmt::kPlain, fmt::kPlain, fmt::kPlain, fmt::kPlain,
                                       fmt::kPlain, fmt::kPlain, fmt::kPlain, fmt::kPlain,
                                       fmt::kPlain, fmt::kPlain, fmt::kPlain, fmt::kPlain));
    const ParquetFile f = ParquetFile::open(file("t.parquet"));
    EXPECT_EQ(f.read_doubles("x").values, values);
    EXPECT_EQ(f.read_doubles("x", {35, 10}).values,
              std::vector<double>(values.begin() + 35, values.begin() + 45));
  }
}

TEST_F(ParquetTest, EmptyAndConstantColumns) {
  {
    ParquetWriter w(file("empty.parquet"));
    w.add_doubles("x", {});
    w.add_floats("v", {}, 3);
    w.write();
  }
  const ParquetFile empty = ParquetFile::open(file("empty.parquet"));
  EXPECT_EQ(empty.num_rows(), 0);
  EXPECT_EQ(empty.read_doubles("x").values.size(), 0u);
  EXPECT_EQ(empty.read_floats("v").rows, 0);

  // One dictionary entry: indices of bit width 0.
  WriteOptions o;
  o.dictionary = true;
  ParquetWriter w(file("constant.parquet"), o);
  w.add_ints("task_index", std::vector<int64_t>(2000, 7));
  w.add_strings("task", std::vector<std::string>(2000, "same"));
  w.write();
  const ParquetFile f = ParquetFile::open(file("constant.parquet"));
  EXPECT_EQ(f.read_ints("task_index").values, std::vector<int64_t>(2000, 7));
  EXPECT_EQ(f.read_strings("task", {1500, 3}).values, std::vector<std::string>(3, "same"));
}

TEST_F(ParquetTest, WriteIsAtomic) {
  // No temporary (t.parquet.tmp.<pid>.<n>) is left beside the file.
  const auto names = [&] {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      found.push_back(entry.path().filename().string());
    }
    return found;
  };
  Table(5).write(file("t.parquet"), {});
  EXPECT_EQ(names(), std::vector<std::string>{"t.parquet"});
  ParquetWriter w(file("t.parquet"));
  w.add_doubles("a", {1, 2});
  w.add_doubles("b", {1});
  EXPECT_EQ(error_of([&] { w.write(); }),
            file("t.parquet") + ": column \"b\" has 1 rows, column \"a\" has 2");
  EXPECT_EQ(names(), std::vector<std::string>{"t.parquet"});
  EXPECT_EQ(ParquetFile::open(file("t.parquet")).num_rows(), 5);  // the old file stays
}

TEST_F(ParquetTest, WriterRefusesWhatDoesNotFit) {
  ParquetWriter w(file("t.parquet"));
  const std::string p = file("t.parquet");
  EXPECT_EQ(error_of([&] {
              w.add_ints("b", {0, 2}, 0, PhysicalType::kBoolean);
            }),
            p + ": column \"b\": value 2 at 1 does not fit BOOLEAN");
  EXPECT_EQ(error_of([&] { w.add_ints("i", {int64_t{1} << 40}, 0, PhysicalType::kInt32); }),
            p + ": column \"i\": value 1099511627776 at 0 does not fit INT32");
  EXPECT_EQ(error_of([&] { w.add_floats("f", {1.0f}, 0, PhysicalType::kInt64); }),
            p + ": column \"f\": add_floats writes FLOAT or DOUBLE, not INT64");
  EXPECT_EQ(error_of([&] {
              w.add_doubles("v", {1, 2, 3}, 2);
            }),
            p + ": column \"v\": 3 values do not make rows of 2");
  w.add_doubles("x", {1});
  EXPECT_EQ(error_of([&] { w.add_doubles("x", {1}); }), p + ": column \"x\": added twice");
}

TEST_F(ParquetTest, ReadErrorsNameFileAndColumn) {
  Table(10).write(file("t.parquet"), {});
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  const std::string p = file("t.parquet");
  EXPECT_EQ(error_of([&] { f.read_doubles("acton"); }),
            p + ": unknown column \"acton\"; did you mean \"action\"? (allowed: observation.state, "
                "action, state.f64, timestamp, index, episode_index, next.done, mask, small, "
                "task)");
  EXPECT_EQ(error_of([&] { f.read_strings("action"); }),
            p + ": column \"action\": read_strings cannot read DOUBLE values");
  EXPECT_EQ(error_of([&] { f.read_floats("task"); }),
            p + ": column \"task\": read_floats cannot read BYTE_ARRAY values");
  EXPECT_EQ(error_of([&] { f.read_ints("timestamp"); }),
            p + ": column \"timestamp\": read_ints cannot read DOUBLE values");
  EXPECT_EQ(error_of([&] {
              f.read_ints("index", {5, 6});
            }),
            p + ": column \"index\": rows [5, 11) are outside the file's 10 rows");
  EXPECT_EQ(error_of([&] {
              f.read_ints("index", {-1, 2});
            }),
            p + ": column \"index\": rows [-1, 1) are outside the file's 10 rows");
  EXPECT_EQ(error_of([&] {
              f.read_ints("index", {11, -1});
            }),
            p + ": column \"index\": rows [11, 11) are outside the file's 10 rows");
  // Integers widen to floats; booleans read as 0/1.
  EXPECT_EQ(f.read_doubles("index", {2, 1}).values[0], 1000000000002.0);
  EXPECT_EQ(f.read_ints("next.done", {4, 1}).values[0], 1);
}

// ---------------------------------------------------------------------------------------------
// Hand-built files: what the writer never writes (refusals, legacy layouts, damage).

// One leaf column chunk: raw pages and the metadata to claim for them.
struct RawChunk {
  int32_t type = fmt::kDouble;
  std::vector<std::string> path;
  int32_t codec = fmt::kUncompressed;
  int64_t num_values = 0;
  std::string pages;
  int64_t claimed_size = -1;  // total_compressed_size to claim; -1: the real size
};

// Writes PAR1, the chunks as one row group of `rows`, the footer of `schema`.
void write_raw_file(const std::string& path, std::vector<fmt::SchemaElement> schema,
                    const std::vector<RawChunk>& chunks, int64_t rows) {
  std::string out = "PAR1";
  fmt::FileMetaData meta;
  meta.schema = std::move(schema);
  meta.num_rows = rows;
  fmt::RowGroup rg;
  rg.num_rows = rows;
  for (const RawChunk& c : chunks) {
    fmt::ColumnMetaData m;
    m.type = c.type;
    m.encodings = {fmt::kPlain, fmt::kRle};
    m.path_in_schema = c.path;
    m.codec = c.codec;
    m.num_values = c.num_values;
    m.total_compressed_size =
        c.claimed_size >= 0 ? c.claimed_size : static_cast<int64_t>(c.pages.size());
    m.total_uncompressed_size = m.total_compressed_size;
    m.data_page_offset = static_cast<int64_t>(out.size());
    fmt::ColumnChunk chunk;
    chunk.file_offset = m.data_page_offset;
    chunk.meta_data = m;
    rg.columns.push_back(chunk);
    out += c.pages;
  }
  meta.row_groups.push_back(rg);
  const std::string footer = fmt::encode(meta);
  out += footer;
  const uint32_t size = static_cast<uint32_t>(footer.size());
  out.append(reinterpret_cast<const char*>(&size), 4);
  out += "PAR1";
  write_bytes(path, out);
}

fmt::SchemaElement root(int children) {
  fmt::SchemaElement e;
  e.name = "schema";
  e.num_children = children;
  return e;
}

fmt::SchemaElement leaf(const std::string& name, int32_t type, int32_t repetition) {
  fmt::SchemaElement e;
  e.name = name;
  e.type = type;
  e.repetition = repetition;
  return e;
}

fmt::SchemaElement group(const std::string& name, int children, int32_t repetition,
                         std::optional<int32_t> converted = std::nullopt) {
  fmt::SchemaElement e;
  e.name = name;
  e.num_children = children;
  e.repetition = repetition;
  e.converted_type = converted;
  return e;
}

std::string hybrid(const std::vector<uint32_t>& values, int width) {
  std::string out;
  encode_hybrid(values, width, out);
  return out;
}

// v1 levels: a 4-byte length, then the hybrid encoding.
std::string levels_v1(const std::vector<uint32_t>& values, int width) {
  const std::string body = hybrid(values, width);
  const uint32_t size = static_cast<uint32_t>(body.size());
  return std::string(reinterpret_cast<const char*>(&size), 4) + body;
}

std::string plain_doubles(const std::vector<double>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8);
}

// A v1 data page with the given body, uncompressed.
std::string page_v1(int32_t num_values, const std::string& body, int32_t encoding = fmt::kPlain,
                    int32_t level_encoding = fmt::kRle) {
  fmt::PageHeader h;
  h.type = fmt::kDataPage;
  h.uncompressed_page_size = static_cast<int32_t>(body.size());
  h.compressed_page_size = static_cast<int32_t>(body.size());
  h.data_page_header = fmt::DataPageHeader{num_values, encoding, level_encoding, level_encoding};
  return fmt::encode(h) + body;
}

// A LIST column of doubles `name` (optional list > repeated `list` > optional `element`).
std::vector<fmt::SchemaElement> list_schema(const std::string& name,
                                            const std::string& repeated = "list",
                                            const std::string& element = "element") {
  return {group(name, 1, fmt::kOptional, fmt::kList), group(repeated, 1, fmt::kRepeated),
          leaf(element, fmt::kDouble, fmt::kOptional)};
}

// A file with a flat double column "ok" (3 rows) beside the field(s) under test, so that a
// refused column never stops the others being read.
void write_with_ok_column(const std::string& path, std::vector<fmt::SchemaElement> field,
                          int top_level_fields, std::vector<RawChunk> chunks, int64_t rows = 3) {
  std::vector<fmt::SchemaElement> schema = {root(top_level_fields + 1),
                                            leaf("ok", fmt::kDouble, fmt::kRequired)};
  schema.insert(schema.end(), field.begin(), field.end());
  RawChunk ok;
  ok.path = {"ok"};
  ok.num_values = rows;
  std::vector<double> values(static_cast<size_t>(rows), 2.5);
  ok.pages = page_v1(static_cast<int32_t>(rows), plain_doubles(values));
  chunks.insert(chunks.begin(), ok);
  write_raw_file(path, schema, chunks, rows);
}

// A list chunk of the given levels and present values (uncompressed v1 page).
RawChunk list_chunk(const std::vector<uint32_t>& rep, const std::vector<uint32_t>& def,
                    const std::vector<double>& values) {
  RawChunk c;
  c.path = {"x", "list", "element"};
  c.num_values = static_cast<int64_t>(rep.size());
  c.pages = page_v1(static_cast<int32_t>(rep.size()),
                    levels_v1(rep, 1) + levels_v1(def, 2) + plain_doubles(values));
  return c;
}

const char kRewriteFlat[] = "only flat columns and lists of numbers or strings are";

TEST_F(ParquetTest, LegacyListLayoutsAreRead) {
  // 2-level: the repeated field is the element; and the `array` name of old writers.
  {
    std::vector<fmt::SchemaElement> field = {group("x", 1, fmt::kOptional, fmt::kList),
                                             leaf("array", fmt::kDouble, fmt::kRepeated)};
    RawChunk c;
    c.path = {"x", "array"};
    c.num_values = 6;
    c.pages = page_v1(6, levels_v1({0, 1, 0, 1, 0, 1}, 1) + levels_v1({2, 2, 2, 2, 2, 2}, 2) +
                             plain_doubles({1, 2, 3, 4, 5, 6}));
    write_with_ok_column(file("two_level.parquet"), field, 1, {c});
    const ColumnValues<double> x = ParquetFile::open(file("two_level.parquet")).read_doubles("x");
    EXPECT_EQ(x.width, 2);
    EXPECT_EQ(x.values, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  }
  // 3-level with the names `bag`/`item`, required element: max definition level 2.
  {
    std::vector<fmt::SchemaElement> field = {group("x", 1, fmt::kOptional, fmt::kList),
                                             group("bag", 1, fmt::kRepeated),
                                             leaf("item", fmt::kDouble, fmt::kRequired)};
    RawChunk c;
    c.path = {"x", "bag", "item"};
    c.num_values = 3;
    c.pages =
        page_v1(3, levels_v1({0, 0, 0}, 1) + levels_v1({2, 2, 2}, 2) + plain_doubles({7, 8, 9}));
    write_with_ok_column(file("item.parquet"), field, 1, {c});
    const ParquetFile f = ParquetFile::open(file("item.parquet"));
    EXPECT_TRUE(f.column("x")->is_list);
    EXPECT_EQ(f.read_doubles("x").values, (std::vector<double>{7, 8, 9}));
    EXPECT_EQ(f.read_doubles("x").width, 1);
  }
}

TEST_F(ParquetTest, OldDictionaryLabelAndUncompressedPagesV2InASnappyChunk) {
  // A dictionary page, a PLAIN_DICTIONARY data page (the Parquet 1.0 label), a PLAIN page v2
  // whose values are stored uncompressed (is_compressed false) although the chunk is SNAPPY.
  fmt::PageHeader dict;
  dict.type = fmt::kDictionaryPage;
  const std::string dict_values = compress(fmt::kSnappy, plain_doubles({0.5, 1.5, 2.5}));
  dict.uncompressed_page_size = 24;
  dict.compressed_page_size = static_cast<int32_t>(dict_values.size());
  dict.dictionary_page_header = fmt::DictionaryPageHeader{3, fmt::kPlainDictionary};
  const std::string indices =
      levels_v1({1, 1, 1, 1}, 1) + std::string(1, '\x02') + hybrid({2, 0, 1, 2}, 2);
  fmt::PageHeader v1;
  v1.type = fmt::kDataPage;
  const std::string v1_body = compress(fmt::kSnappy, indices);
  v1.uncompressed_page_size = static_cast<int32_t>(indices.size());
  v1.compressed_page_size = static_cast<int32_t>(v1_body.size());
  v1.data_page_header = fmt::DataPageHeader{4, fmt::kPlainDictionary, fmt::kRle, fmt::kRle};
  const std::string def = hybrid({1, 1}, 1);
  fmt::PageHeader v2;
  v2.type = fmt::kDataPageV2;
  v2.uncompressed_page_size = v2.compressed_page_size = static_cast<int32_t>(def.size() + 16);
  fmt::DataPageHeaderV2 h;
  h.num_values = h.num_rows = 2;
  h.encoding = fmt::kPlain;
  h.definition_levels_byte_length = static_cast<int32_t>(def.size());
  h.is_compressed = false;
  v2.data_page_header_v2 = h;
  RawChunk c;
  c.path = {"x"};
  c.codec = fmt::kSnappy;
  c.num_values = 6;
  c.pages = fmt::encode(dict) + dict_values + fmt::encode(v1) + v1_body + fmt::encode(v2) + def +
            plain_doubles({7, 8});
  write_with_ok_column(file("t.parquet"), {leaf("x", fmt::kDouble, fmt::kOptional)}, 1, {c}, 6);
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  EXPECT_EQ(f.read_doubles("x").values, (std::vector<double>{2.5, 0.5, 1.5, 2.5, 7, 8}));
  EXPECT_EQ(f.read_doubles("x", {3, 2}).values, (std::vector<double>{2.5, 7}));
}

TEST_F(ParquetTest, EmptyListsInEveryRowHaveWidthZero) {
  write_with_ok_column(file("t.parquet"), list_schema("x"), 1,
                       {list_chunk({0, 0, 0}, {1, 1, 1}, {})});
  const ColumnValues<double> x = ParquetFile::open(file("t.parquet")).read_doubles("x");
  EXPECT_EQ(x.rows, 3);
  EXPECT_EQ(x.width, 0);
  EXPECT_TRUE(x.values.empty());
}

TEST_F(ParquetTest, RefusesNullsAndUnevenLists) {
  const std::string p = file("t.parquet");
  const std::string fill =
      "(every row must have a value); rewrite the file with the nulls "
      "filled or dropped";
  {
    RawChunk c;
    c.path = {"timestamp"};
    c.num_values = 3;
    c.pages = page_v1(3, levels_v1({1, 0, 1}, 1) + plain_doubles({0.0, 0.1}));
    write_with_ok_column(p, {leaf("timestamp", fmt::kDouble, fmt::kOptional)}, 1, {c});
    const ParquetFile f = ParquetFile::open(p);
    EXPECT_EQ(error_of([&] { f.read_doubles("timestamp"); }),
              p + ": column \"timestamp\": a null in row 1 is not supported " + fill);
    EXPECT_EQ(f.read_doubles("ok").values, (std::vector<double>{2.5, 2.5, 2.5}));
  }
  write_with_ok_column(p, list_schema("x"), 1,
                       {list_chunk({0, 1, 0, 1, 0}, {3, 3, 3, 3, 0}, {1, 2, 3, 4})});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": column \"x\": a null in row 2 is not supported " + fill);
  write_with_ok_column(p, list_schema("x"), 1,
                       {list_chunk({0, 1, 0, 1, 0, 1}, {3, 3, 3, 2, 3, 3}, {1, 2, 3, 5, 6})});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": column \"x\": a null list element in row 1 is not supported " + fill);
  write_with_ok_column(
      p, list_schema("x"), 1,
      {list_chunk({0, 1, 0, 1, 1, 0, 1}, {3, 3, 3, 3, 3, 3, 3}, {1, 2, 3, 4, 5, 6, 7})});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": column \"x\": lists of uneven length are not supported (row 0 has 2 elements, "
                "row 1 has 3); rewrite the file with lists of one length in each column");
  write_with_ok_column(p, list_schema("x"), 1, {list_chunk({0, 1, 0, 0}, {3, 3, 1, 1}, {1, 2})});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": column \"x\": lists of uneven length are not supported (row 0 has 2 elements, "
                "row 1 has 0); rewrite the file with lists of one length in each column");
}

TEST_F(ParquetTest, ListsOfAnyLengthWithTheirOffsets) {
  // Rows of 2, 3, 0 and 1 elements, as each episode's `tasks` in v3.0 metadata.
  write_with_ok_column(
      file("t.parquet"), list_schema("x"), 1,
      {list_chunk({0, 1, 0, 1, 1, 0, 0}, {3, 3, 3, 3, 3, 1, 3}, {1, 2, 3, 4, 5, 6})}, 4);
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  const ListValues<double> all = f.read_double_lists("x");
  EXPECT_EQ(all.rows, 4);
  EXPECT_EQ(all.offsets, (std::vector<int64_t>{0, 2, 5, 5, 6}));
  EXPECT_EQ(all.values, (std::vector<double>{1, 2, 3, 4, 5, 6}));
  const ListValues<double> middle = f.read_double_lists("x", {1, 2});
  EXPECT_EQ(middle.offsets, (std::vector<int64_t>{0, 3, 3}));
  EXPECT_EQ(middle.values, (std::vector<double>{3, 4, 5}));
  const ListValues<double> flat = f.read_double_lists("ok", {1, 3});
  EXPECT_EQ(flat.offsets, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(flat.values, (std::vector<double>{2.5, 2.5, 2.5}));
  EXPECT_EQ(error_of([&] { f.read_string_lists("x"); }),
            file("t.parquet") + ": column \"x\": read_string_lists cannot read DOUBLE values");
}

TEST_F(ParquetTest, ListsOfAnyLengthAcrossRowGroups) {
  Table table(30);
  WriteOptions o;
  o.row_group_rows = 7;
  o.page_rows = 3;
  table.write(file("t.parquet"), o);
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  const ListValues<std::string> tasks = f.read_string_lists("task", {5, 10});
  EXPECT_EQ(tasks.offsets.size(), 11u);
  EXPECT_EQ(tasks.offsets.back(), 10);
  EXPECT_EQ(tasks.values, Table::slice(table.task, 1, {5, 10}));
  const ListValues<int64_t> mask = f.read_int_lists("mask", {6, 9});
  EXPECT_EQ(mask.offsets.back(), 36);
  EXPECT_EQ(mask.values, Table::slice(table.mask, 4, {6, 9}));
}

// v3.0's episode metadata: each episode's `tasks` is a list of strings of its own length.
TEST_F(ParquetTest, WritesStringListsOfAnyLength) {
  const std::vector<std::vector<std::string>> rows = {
      {"pick"}, {"place", "valid"}, {"open the drawer"}, {"a", "b", "c"}, {"z"}};
  WriteOptions o;
  o.row_group_rows = 2;
  o.page_rows = 1;
  o.dictionary = true;
  ParquetWriter writer(file("t.parquet"), o);
  writer.add_string_lists("tasks", rows);
  writer.add_ints("episode_index", {0, 1, 2, 3, 4});
  writer.write();
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  ASSERT_TRUE(f.column("tasks")->is_list);
  const ListValues<std::string> all = f.read_string_lists("tasks");
  EXPECT_EQ(all.offsets, (std::vector<int64_t>{0, 1, 3, 4, 7, 8}));
  EXPECT_EQ(all.values, (std::vector<std::string>{"pick", "place", "valid", "open the drawer", "a",
                                                  "b", "c", "z"}));
  const ListValues<std::string> middle = f.read_string_lists("tasks", {1, 3});
  EXPECT_EQ(middle.values,
            (std::vector<std::string>{"place", "valid", "open the drawer", "a", "b", "c"}));
  if (testing::hyparquet_missing().empty()) {
    const nlohmann::json theirs = testing::read_with_hyparquet(file("t.parquet"));
    EXPECT_EQ(theirs.at("tasks"), nlohmann::json(rows));
  }
  ParquetWriter empty(file("e.parquet"));
  EXPECT_EQ(error_of([&] {
              empty.add_string_lists("tasks", {{"a"}, {}});
            }),
            file("e.parquet") +
                ": column \"tasks\": row 1 is an empty list; add_string_lists writes lists of at "
                "least one string");
}

TEST_F(ParquetTest, UnevenListsInALaterRowGroupNameTheRows) {
  // Row group 0: rows 0-1 of 2 elements; row group 1: rows 2-3, the second of 3.
  std::vector<fmt::SchemaElement> schema = {root(1)};
  for (const auto& e : list_schema("x")) schema.push_back(e);
  const RawChunk a = list_chunk({0, 1, 0, 1}, {3, 3, 3, 3}, {1, 2, 3, 4});
  const RawChunk b = list_chunk({0, 1, 0, 1, 1}, {3, 3, 3, 3, 3}, {1, 2, 3, 4, 5});
  std::string out = "PAR1";
  fmt::FileMetaData meta;
  meta.schema = schema;
  meta.num_rows = 4;
  for (const RawChunk* c : {&a, &b}) {
    fmt::ColumnMetaData m;
    m.type = fmt::kDouble;
    m.path_in_schema = c->path;
    m.num_values = c->num_values;
    m.total_compressed_size = m.total_uncompressed_size = static_cast<int64_t>(c->pages.size());
    m.data_page_offset = static_cast<int64_t>(out.size());
    fmt::RowGroup rg;
    rg.num_rows = 2;
    rg.columns.push_back(fmt::ColumnChunk{"", m.data_page_offset, m});
    meta.row_groups.push_back(rg);
    out += c->pages;
  }
  const std::string footer = fmt::encode(meta);
  const uint32_t size = static_cast<uint32_t>(footer.size());
  write_bytes(file("t.parquet"),
              out + footer + std::string(reinterpret_cast<const char*>(&size), 4) + "PAR1");
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  const std::string refusal =
      file("t.parquet") +
      ": column \"x\": lists of uneven length are not supported (row %d has "
      "2 elements, row 3 has 3); rewrite the file with lists of one "
      "length in each column";
  char expected[512];
  std::snprintf(expected, sizeof(expected), refusal.c_str(), 0);
  EXPECT_EQ(error_of([&] { f.read_doubles("x"); }), expected);
  std::snprintf(expected, sizeof(expected), refusal.c_str(), 2);
  EXPECT_EQ(error_of([&] { f.read_doubles("x", {2, 2}); }), expected);
  EXPECT_EQ(f.read_doubles("x", {0, 2}).values, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(f.read_double_lists("x").offsets, (std::vector<int64_t>{0, 2, 4, 6, 9}));
}

struct EncodingCase {
  int32_t encoding;
  const char* name;
};

class RefusedEncoding : public ParquetTest, public ::testing::WithParamInterface<EncodingCase> {};

TEST_P(RefusedEncoding, NamesFileColumnAndEncoding) {
  RawChunk c;
  c.type = GetParam().encoding == fmt::kByteStreamSplit ? fmt::kDouble : fmt::kInt64;
  c.path = {"index"};
  c.num_values = 3;
  c.pages = page_v1(3, levels_v1({1, 1, 1}, 1) + std::string(24, '\0'), GetParam().encoding);
  write_with_ok_column(file("t.parquet"), {leaf("index", c.type, fmt::kOptional)}, 1, {c});
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  EXPECT_EQ(error_of([&] { f.read_doubles("index"); }),
            file("t.parquet") + ": column \"index\": encoding " + GetParam().name +
                " is not supported (only PLAIN and dictionary encodings are); rewrite the file "
                "with PLAIN or dictionary encoding (Arrow's default)");
}

INSTANTIATE_TEST_SUITE_P(
    Delta, RefusedEncoding,
    ::testing::Values(EncodingCase{fmt::kDeltaBinaryPacked, "DELTA_BINARY_PACKED"},
                      EncodingCase{fmt::kDeltaLengthByteArray, "DELTA_LENGTH_BYTE_ARRAY"},
                      EncodingCase{fmt::kDeltaByteArray, "DELTA_BYTE_ARRAY"},
                      EncodingCase{fmt::kByteStreamSplit, "BYTE_STREAM_SPLIT"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(ParquetTest, RefusesOtherCodecs) {
  for (const auto& [codec, name] :
       std::vector<std::pair<int32_t, std::string>>{{fmt::kLz4, "LZ4"},
                                                    {fmt::kLz4Raw, "LZ4_RAW"},
                                                    {fmt::kBrotli, "BROTLI"},
                                                    {fmt::kLzo, "LZO"},
                                                    {42, "codec 42"}}) {
    RawChunk c;
    c.path = {"x"};
    c.codec = codec;
    c.num_values = 3;
    c.pages = page_v1(3, plain_doubles({1, 2, 3}));
    write_with_ok_column(file("t.parquet"), {leaf("x", fmt::kDouble, fmt::kRequired)}, 1, {c});
    EXPECT_EQ(error_of([&] { ParquetFile::open(file("t.parquet")).read_doubles("x"); }),
              file("t.parquet") + ": column \"x\": codec " + name +
                  " is not supported (only UNCOMPRESSED, SNAPPY, GZIP and ZSTD are); rewrite the "
                  "file with one of those (pyarrow: compression=\"snappy\")");
  }
}

TEST_F(ParquetTest, RefusesBitPackedLevels) {
  RawChunk c;
  c.path = {"x"};
  c.num_values = 3;
  c.pages =
      page_v1(3, std::string(1, '\x07') + plain_doubles({1, 2, 3}), fmt::kPlain, fmt::kBitPacked);
  write_with_ok_column(file("t.parquet"), {leaf("x", fmt::kDouble, fmt::kOptional)}, 1, {c});
  EXPECT_EQ(error_of([&] { ParquetFile::open(file("t.parquet")).read_doubles("x"); }),
            file("t.parquet") +
                ": column \"x\": BIT_PACKED levels are not supported (only RLE "
                "levels are); rewrite the file with a current Parquet writer");
}

// Nested schemas: refused per column at read; open() and the other columns work.
struct SchemaCase {
  const char* name;
  std::vector<fmt::SchemaElement> field;
  std::vector<std::vector<std::string>> leaf_paths;
  std::vector<int32_t> leaf_types;
  std::string refusal;
};

std::vector<SchemaCase> schema_cases() {
  const std::string list_of = std::string(" is not supported (") + kRewriteFlat + "); rewrite ";
  fmt::SchemaElement map = group("x", 1, fmt::kOptional, fmt::kMap);
  fmt::SchemaElement key = leaf("key", fmt::kByteArray, fmt::kRequired);
  key.logical_type = "STRING";
  fmt::SchemaElement inner_list = group("element", 1, fmt::kOptional, fmt::kList);
  return {
      {"ListOfLists",
       {group("x", 1, fmt::kOptional, fmt::kList), group("list", 1, fmt::kRepeated), inner_list,
        group("list", 1, fmt::kRepeated), leaf("element", fmt::kDouble, fmt::kOptional)},
       {{"x", "list", "element", "list", "element"}},
       {fmt::kDouble},
       "a list of lists" + list_of + "the file with each inner list as a list column of its own"},
      {"Struct",
       {group("x", 2, fmt::kOptional), leaf("a", fmt::kDouble, fmt::kRequired),
        leaf("b", fmt::kInt64, fmt::kOptional)},
       {{"x", "a"}, {"x", "b"}},
       {fmt::kDouble, fmt::kInt64},
       "a struct" + list_of + "the file with each field of it as a column of its own"},
      {"Map",
       {map, group("key_value", 2, fmt::kRepeated), key,
        leaf("value", fmt::kDouble, fmt::kOptional)},
       {{"x", "key_value", "key"}, {"x", "key_value", "value"}},
       {fmt::kByteArray, fmt::kDouble},
       "a map" + list_of + "the file with the keys and the values as list columns of their own"},
      {"ListOfStructs",
       {group("x", 1, fmt::kOptional, fmt::kList), group("list", 1, fmt::kRepeated),
        group("element", 2, fmt::kOptional), leaf("a", fmt::kDouble, fmt::kOptional),
        leaf("b", fmt::kDouble, fmt::kOptional)},
       {{"x", "list", "element", "a"}, {"x", "list", "element", "b"}},
       {fmt::kDouble, fmt::kDouble},
       "a list of structs" + list_of +
           "the file with each field of the struct as a list column of its own"},
      {"Int96",
       {leaf("x", fmt::kInt96, fmt::kOptional)},
       {{"x"}},
       {fmt::kInt96},
       "physical type INT96 is not supported (only BOOLEAN, INT32, INT64, FLOAT, DOUBLE and "
       "BYTE_ARRAY are); rewrite the file with the column cast to one of those"},
  };
}

class RefusedSchema : public ParquetTest, public ::testing::WithParamInterface<SchemaCase> {};

TEST_P(RefusedSchema, AtReadOfThatColumnOnly) {
  const SchemaCase& s = GetParam();
  std::vector<RawChunk> chunks;
  for (size_t i = 0; i < s.leaf_paths.size(); ++i) {
    RawChunk c;  // no pages: nothing of a refused column is decoded
    c.type = s.leaf_types[i];
    c.path = s.leaf_paths[i];
    c.num_values = s.leaf_paths[i].size() > 2 ? 0 : 3;
    c.claimed_size = 0;
    chunks.push_back(c);
  }
  write_with_ok_column(file("t.parquet"), s.field, 1, chunks);
  const ParquetFile f = ParquetFile::open(file("t.parquet"));
  ASSERT_NE(f.column("x"), nullptr);
  EXPECT_EQ(f.column("x")->unsupported, s.refusal);
  EXPECT_EQ(error_of([&] { f.read_doubles("x"); }),
            file("t.parquet") + ": column \"x\": " + s.refusal);
  EXPECT_EQ(f.read_doubles("ok").values, (std::vector<double>{2.5, 2.5, 2.5}));
}

INSTANTIATE_TEST_SUITE_P(Nested, RefusedSchema, ::testing::ValuesIn(schema_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Damaged files: an error naming the file, never a crash (the suite also runs under ASan).

// Opens `path` and reads every readable column; returns the error, or "" when all is read.
std::string open_and_read_all(const std::string& path) {
  try {
    const ParquetFile f = ParquetFile::open(path);
    for (const ColumnInfo& c : f.columns()) {
      if (!c.unsupported.empty()) continue;
      if (c.type == PhysicalType::kByteArray) {
        f.read_strings(c.name);
      } else if (c.type == PhysicalType::kBoolean) {
        f.read_ints(c.name);
      } else {
        f.read_doubles(c.name);
      }
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(ParquetTest, WrongMagic) {
  Table(20).write(file("t.parquet"), {});
  const std::string good = read_bytes(file("t.parquet"));
  const std::string p = file("bad.parquet");
  std::string bad = good;
  bad[0] = 'X';
  write_bytes(p, bad);
  EXPECT_EQ(open_and_read_all(p), p + ": not a Parquet file (no PAR1 magic at its start)");
  bad = good;
  bad[bad.size() - 1] = 'X';
  write_bytes(p, bad);
  EXPECT_EQ(open_and_read_all(p), p + ": not a Parquet file (no PAR1 magic at its end: "
                                      "truncated, or another format)");
  write_bytes(p, "PAR1");
  EXPECT_EQ(open_and_read_all(p), p + ": not a Parquet file (4 bytes; a Parquet file has at "
                                      "least 12)");
  EXPECT_EQ(open_and_read_all(file("absent.parquet")),
            file("absent.parquet") + ": cannot open: No such file or directory");
}

// A FIFO once blocked the open forever (issue 25); it, a directory and a device are refused.
TEST_F(ParquetTest, OnlyRegularFilesAreOpened) {
  const std::string fifo = file("fifo.parquet");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(open_and_read_all(fifo), fifo + ": not a regular file (a FIFO)");
  fs::create_directories(file("dir.parquet"));
  EXPECT_EQ(open_and_read_all(file("dir.parquet")),
            file("dir.parquet") + ": not a regular file (a directory)");
  EXPECT_EQ(open_and_read_all("/dev/zero"), "/dev/zero: not a regular file (a character device)");
}

TEST_F(ParquetTest, TruncatedAnywhere) {
  Table(40).write(file("t.parquet"), {});
  const std::string good = read_bytes(file("t.parquet"));
  const std::string p = file("cut.parquet");
  // Every 13th length through the pages, and every length that cuts the footer's tail.
  for (size_t size = 0; size < good.size(); size += size + 24 < good.size() ? 13 : 1) {
    write_bytes(p, good.substr(0, size));
    const std::string error = open_and_read_all(p);
    ASSERT_THAT(error, StartsWith(p + ": not a Parquet file")) << "cut at " << size;
  }
}

TEST_F(ParquetTest, FooterLengthWrongOrHuge) {
  Table(20).write(file("t.parquet"), {});
  const std::string good = read_bytes(file("t.parquet"));
  const uint32_t footer =
      load_le<uint32_t>(reinterpret_cast<const uint8_t*>(good.data()) + good.size() - 8);
  const std::string p = file("bad.parquet");
  auto with_footer_length = [&](uint32_t length) {
    std::string bad = good;
    std::memcpy(bad.data() + bad.size() - 8, &length, 4);
    write_bytes(p, bad);
    return open_and_read_all(p);
  };
  EXPECT_EQ(with_footer_length(0xfffffff0u),
            p + ": damaged Parquet file: footer length 4294967280 exceeds the file's " +
                std::to_string(good.size()) + " bytes");
  EXPECT_EQ(with_footer_length(static_cast<uint32_t>(good.size() - 11)),
            p + ": damaged Parquet file: footer length " + std::to_string(good.size() - 11) +
                " exceeds the file's " + std::to_string(good.size()) + " bytes");
  for (uint32_t length = 0; length < footer + 64; ++length) {
    if (length == footer) continue;
    EXPECT_THAT(with_footer_length(length), StartsWith(p + ": damaged Parquet ")) << length;
  }
}

TEST_F(ParquetTest, EveryByteOfTheFooterFlipped) {
  Table(12).write(file("t.parquet"), {});
  const std::string good = read_bytes(file("t.parquet"));
  const size_t footer =
      load_le<uint32_t>(reinterpret_cast<const uint8_t*>(good.data()) + good.size() - 8);
  const std::string p = file("bad.parquet");
  for (size_t i = good.size() - 8 - footer; i < good.size() - 8; ++i) {
    for (uint8_t mask : {0x01, 0xff}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      write_bytes(p, bad);
      const std::string error = open_and_read_all(p);
      // A flip may leave a readable file (a value or an unused field); it never crashes.
      if (!error.empty()) {
        ASSERT_THAT(error, StartsWith(p + ": ")) << "byte " << i;
      }
    }
  }
}

TEST_F(ParquetTest, EveryFifthByteOfThePagesFlipped) {
  // Each codec; dictionary pages and pages v2 with snappy and zstd.
  for (Codec codec : {Codec::kUncompressed, Codec::kSnappy, Codec::kGzip, Codec::kZstd}) {
    WriteOptions o;
    o.codec = codec;
    o.dictionary = codec == Codec::kSnappy || codec == Codec::kZstd;
    o.data_page_version = o.dictionary ? 2 : 1;
    o.page_rows = 4;
    o.row_group_rows = 6;
    Table(8).write(file("t.parquet"), o);
    const std::string good = read_bytes(file("t.parquet"));
    const size_t footer =
        load_le<uint32_t>(reinterpret_cast<const uint8_t*>(good.data()) + good.size() - 8);
    const std::string p = file("bad.parquet");
    for (size_t i = 4; i < good.size() - 8 - footer; i += 5) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0x5a);
      write_bytes(p, bad);
      const std::string error = open_and_read_all(p);
      // A flipped value byte reads as another value; anything else is an error naming the file.
      if (!error.empty()) {
        ASSERT_THAT(error, StartsWith(p + ": ")) << name_of(codec) << " byte " << i;
      }
    }
  }
}

TEST_F(ParquetTest, CorruptSnappyBlock) {
  WriteOptions o;
  o.codec = Codec::kSnappy;
  ParquetWriter w(file("t.parquet"), o);
  std::vector<double> values;
  for (int i = 0; i < 100; ++i) values.push_back(i % 10);
  w.add_doubles("x", values);
  w.write();
  std::string data = read_bytes(file("t.parquet"));
  size_t header = 0;
  const fmt::PageHeader h = fmt::decode_page_header(
      reinterpret_cast<const uint8_t*>(data.data()) + 4, data.size() - 4, header);
  // Past the block's length varint, fill the block with copy ops that reach before its start.
  for (int32_t i = 2; i < h.compressed_page_size; ++i) data[4 + header + i] = '\xff';
  const std::string p = file("bad.parquet");
  write_bytes(p, data);
  EXPECT_EQ(open_and_read_all(p), p + ": damaged Parquet file: column \"x\", row group 0: "
                                      "corrupt SNAPPY block");
  data[4 + header] = '\x7f';  // the block's length
  write_bytes(p, data);
  EXPECT_EQ(open_and_read_all(p), p +
                                      ": damaged Parquet file: column \"x\", row group 0: "
                                      "SNAPPY block of 127 bytes, the page header says " +
                                      std::to_string(h.uncompressed_page_size));
}

TEST_F(ParquetTest, PageOrChunkPastTheEnd) {
  const std::string p = file("t.parquet");
  RawChunk c;
  c.path = {"x"};
  c.num_values = 3;
  c.pages = page_v1(3, plain_doubles({1, 2, 3}));
  c.claimed_size = static_cast<int64_t>(c.pages.size()) - 5;  // the page runs past the chunk
  write_with_ok_column(p, {leaf("x", fmt::kDouble, fmt::kRequired)}, 1, {c});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": damaged Parquet file: column \"x\", row group 0: a page of 24 bytes runs past "
                "the end of the column chunk");

  c.claimed_size = 1 << 20;  // the chunk runs past the data
  write_with_ok_column(p, {leaf("x", fmt::kDouble, fmt::kRequired)}, 1, {c});
  EXPECT_THAT(error_of([&] { ParquetFile::open(p); }),
              ::testing::MatchesRegex("[^:]*: damaged Parquet file: column \"x\", row group 0: "
                                      "byte range [0-9]+\\+1048576 lies outside the file's data "
                                      "\\([0-9]+ bytes before the footer\\)"));
}

TEST_F(ParquetTest, CountsThatDisagree) {
  const std::string p = file("t.parquet");
  // A page with fewer values than its chunk claims.
  RawChunk c;
  c.path = {"x"};
  c.num_values = 3;
  c.pages = page_v1(2, plain_doubles({1, 2}));
  write_with_ok_column(p, {leaf("x", fmt::kDouble, fmt::kRequired)}, 1, {c});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": damaged Parquet file: column \"x\", row group 0: the pages hold 2 values, the "
                "column metadata says 3");
  // A page claiming more values than its bytes hold.
  c.pages = page_v1(3, plain_doubles({1, 2}));
  write_with_ok_column(p, {leaf("x", fmt::kDouble, fmt::kRequired)}, 1, {c});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": damaged Parquet file: column \"x\", row group 0: PLAIN page of 16 bytes holds "
                "fewer than 3 values");
  // A flat column with another row count than its row group.
  c.num_values = 2;
  c.pages = page_v1(2, plain_doubles({1, 2}));
  write_with_ok_column(p, {leaf("x", fmt::kDouble, fmt::kRequired)}, 1, {c});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p); }),
            p + ": damaged Parquet file: column \"x\", row group 0: 2 values in 3 rows");
  // A list column with fewer rows than its row group.
  write_with_ok_column(p, list_schema("x"), 1,
                       {list_chunk({0, 1, 0, 1}, {3, 3, 3, 3}, {1, 2, 3, 4})});
  EXPECT_EQ(error_of([&] { ParquetFile::open(p).read_doubles("x"); }),
            p + ": damaged Parquet file: column \"x\", row group 0: 2 rows, the row group has 3");
}

TEST(ThriftCompact, BoundsDepthAndListSizes) {
  // FileMetaData whose unknown field 5 nests structs 100 deep.
  std::string deep = "\x5c";
  deep += std::string(100, '\x1c') + std::string(102, '\0');
  EXPECT_EQ(error_of([&] {
              fmt::decode_file_metadata(reinterpret_cast<const uint8_t*>(deep.data()), deep.size());
            }),
            "Thrift structs nested too deeply");
  // A schema list claiming a million elements in 6 bytes.
  const std::string big("\x29\xfc\xc0\x84\x3d\x00", 6);
  EXPECT_EQ(error_of([&] {
              fmt::decode_file_metadata(reinterpret_cast<const uint8_t*>(big.data()), big.size());
            }),
            "Thrift list of 1000000 elements in 1 bytes");
}

// ---------------------------------------------------------------------------------------------
// Our files read by hyparquet (npm), an independent implementation, under node.

using testing::hyparquet_missing;
using testing::read_with_hyparquet;

double json_number(const nlohmann::json& v) {
  if (v.is_string()) return std::stod(v.get<std::string>());  // "NaN", int64 as text
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  return v.get<double>();
}

// Compares every value of every column of `f` with what hyparquet read.
void expect_same_as_hyparquet(const ParquetFile& f, const nlohmann::json& theirs) {
  ASSERT_EQ(theirs.size(), f.columns().size());
  for (const ColumnInfo& c : f.columns()) {
    SCOPED_TRACE(c.name);
    const nlohmann::json& rows = theirs.at(c.name);
    ASSERT_EQ(static_cast<int64_t>(rows.size()), f.num_rows());
    if (c.type == PhysicalType::kByteArray) {
      const ColumnValues<std::string> ours = f.read_strings(c.name);
      for (size_t r = 0; r < rows.size(); ++r)
        ASSERT_EQ(ours.values[r], rows[r].get<std::string>()) << r;
      continue;
    }
    const ColumnValues<double> ours =
        c.type == PhysicalType::kBoolean ? ColumnValues<double>{} : f.read_doubles(c.name);
    const ColumnValues<int64_t> ints = c.type == PhysicalType::kBoolean ||
                                               c.type == PhysicalType::kInt64 ||
                                               c.type == PhysicalType::kInt32
                                           ? f.read_ints(c.name)
                                           : ColumnValues<int64_t>{};
    for (size_t r = 0; r < rows.size(); ++r) {
      const nlohmann::json row = c.is_list ? rows[r] : nlohmann::json::array({rows[r]});
      for (size_t j = 0; j < row.size(); ++j) {
        const size_t at = r * row.size() + j;
        if (c.type == PhysicalType::kInt64 && row[j].is_string()) {
          ASSERT_EQ(ints.values[at], std::stoll(row[j].get<std::string>())) << r << "," << j;
        } else if (!ints.values.empty()) {
          ASSERT_EQ(ints.values[at], static_cast<int64_t>(json_number(row[j]))) << r << "," << j;
        } else {
          ASSERT_EQ(ours.values[at], json_number(row[j])) << r << "," << j;
        }
      }
    }
  }
}

class Hyparquet : public ParquetTest {
 protected:
  void SetUp() override {
    const std::string missing = hyparquet_missing();
    if (!missing.empty()) GTEST_SKIP() << "hyparquet cannot run: " << missing;
    ParquetTest::SetUp();
  }
};

TEST_F(Hyparquet, ReadsOurFilesAsWeDo) {
  for (const Layout& layout : all_layouts()) {
    SCOPED_TRACE(name_of(layout.codec) + std::string(layout.dictionary ? " dict" : " plain") +
                 " v" + std::to_string(layout.page_version));
    WriteOptions o;
    o.codec = layout.codec;
    o.dictionary = layout.dictionary;
    o.data_page_version = layout.page_version;
    o.page_rows = 16;
    o.row_group_rows = 40;
    o.dictionary_page_limit = layout.dictionary ? 300 : o.dictionary_page_limit;
    const Table table(101);
    table.write(file("t.parquet"), o);
    const ParquetFile f = ParquetFile::open(file("t.parquet"));
    table.expect_equal(f, {0, 101});
    expect_same_as_hyparquet(f, read_with_hyparquet(file("t.parquet")));
  }
}

TEST_F(Hyparquet, ReadsTheRealFilesAsWeDo) {
  if (!fs::exists(episode_path(0))) GTEST_SKIP() << "the GR00T sample is absent";
  for (int episode = 0; episode < 5; ++episode) {
    SCOPED_TRACE(episode_path(episode));
    expect_same_as_hyparquet(ParquetFile::open(episode_path(episode)),
                             read_with_hyparquet(episode_path(episode)));
  }
}

}  // namespace
}  // namespace wam::parquet
