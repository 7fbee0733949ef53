// The Parquet reader's throughput on one core: a synthetic long LeRobot episode (200,000 rows:
// two FLOAT lists of 44, a timestamp, three int64 indices, a done flag), SNAPPY, written once with
// PLAIN pages and once with dictionaries, then read whole, column by column, best of 5.
// Prints MB/s of decoded values (4 bytes per FLOAT, 8 per INT64, 1 per BOOLEAN) and of file bytes,
// over the thread's CPU time (so that other processes on the machine do not count), and the wall
// time beside it.
// Usage: parquet_bench [rows] [directory for the files, default /tmp]
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "formats/parquet/parquet.h"

namespace {

using wam::parquet::Codec;
using wam::parquet::ParquetFile;
using wam::parquet::ParquetWriter;
using wam::parquet::PhysicalType;
using wam::parquet::WriteOptions;

constexpr int64_t kWidth = 44;

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void write_episode(const std::string& path, int64_t rows, bool dictionary) {
  std::mt19937 rng(7);
  std::normal_distribution<float> step(0.0f, 0.01f);
  std::vector<float> state(rows * kWidth), action(rows * kWidth), timestamp(rows);
  std::vector<int64_t> index(rows), episode(rows), frame(rows), done(rows);
  std::vector<float> joint(kWidth, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < kWidth; ++j) {
      joint[j] += step(rng);  // a random walk, as joint positions move
      state[r * kWidth + j] = joint[j];
      action[r * kWidth + j] = joint[j] + step(rng);
    }
    timestamp[r] = static_cast<float>(r) / 20.0f;
    index[r] = r;
    episode[r] = r / 500;
    frame[r] = r % 500;
    done[r] = r % 500 == 499;
  }
  WriteOptions options;
  options.codec = Codec::kSnappy;
  options.dictionary = dictionary;
  ParquetWriter w(path, options);
  w.add_floats("observation.state", state, kWidth);
  w.add_floats("action", action, kWidth);
  w.add_floats("timestamp", timestamp);
  w.add_ints("index", index);
  w.add_ints("episode_index", episode);
  w.add_ints("frame_index", frame);
  w.add_ints("next.done", done, 0, PhysicalType::kBoolean);
  w.write();
}

// Reads every column once; returns the bytes of decoded values.
int64_t read_all(const std::string& path) {
  const ParquetFile f = ParquetFile::open(path);
  int64_t bytes = 0;
  for (const auto& c : f.columns()) {
    if (c.type == PhysicalType::kFloat) {
      bytes += 4 * static_cast<int64_t>(f.read_floats(c.name).values.size());
    } else {
      const int64_t n = static_cast<int64_t>(f.read_ints(c.name).values.size());
      bytes += (c.type == PhysicalType::kBoolean ? 1 : 8) * n;
    }
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::stoll(argv[1]) : 200000;
  const std::string dir = argc > 2 ? argv[2] : "/tmp";
  std::printf("%-10s %8s %8s %9s %7s %7s %11s %9s\n", "pages", "rows", "file MB", "values MB",
              "cpu s", "wall s", "values MB/s", "file MB/s");
  for (bool dictionary : {false, true}) {
    const std::string path = dir + "/wam_parquet_bench_" + std::to_string(::getpid()) + ".parquet";
    write_episode(path, rows, dictionary);
    const double file_mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
    double best = 1e30, wall = 0;
    int64_t bytes = 0;
    for (int i = 0; i < 5; ++i) {
      const double cpu_start = cpu_seconds();
      const auto start = std::chrono::steady_clock::now();
      bytes = read_all(path);
      const double cpu = cpu_seconds() - cpu_start;
      if (cpu < best) {
        best = cpu;
        wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    }
    std::filesystem::remove(path);
    const double value_mb = static_cast<double>(bytes) / 1e6;
    std::printf("%-10s %8lld %8.1f %9.1f %7.3f %7.3f %11.0f %9.0f\n",
                dictionary ? "dictionary" : "plain", static_cast<long long>(rows), file_mb,
                value_mb, best, wall, value_mb / best, file_mb / best);
  }
  return 0;
}
