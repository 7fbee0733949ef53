// Latent store read throughput next to a plain pread of the same bytes, in one run.
//
// Writes 4096 samples of the RoboTwin current latent (bfloat16 [48,3,24,16], 110,592 bytes) in
// shards of 256 rows to a temporary directory (or argv[1]), reads every row once so that the
// files (453 MiB) sit in the page cache, then reads random sample ids with 1 and 2 threads:
//   store: ArtifactReader::read_fixed
//   pread: pread of the same row bytes from descriptors this program opens, at offsets it takes
//          from HDF5 itself
//   pread+crc32c: that pread, then the row's CRC-32C (wam::cache::row_checksum) over the bytes
//   read:
//          the least a read that checks every row can cost, to set the store's bookkeeping apart
//          from the hash
//   hdf5:  H5Dread of a one-row hyperslab from datasets kept open (the naive reader), for scale
// Each configuration runs 5 times, interleaved; the median is reported. Cold-cache (disk) reads
// are not measured: both paths would measure the disk.
#include <fcntl.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "formats/latent_store/artifact_builder.h"
#include "formats/latent_store/latent_store.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using wam::cache::ArtifactBuilder;
using wam::cache::ArtifactReader;

constexpr int64_t kSamples = 4096;
constexpr int64_t kShardRows = 256;
constexpr size_t kRowWords = 48 * 3 * 24 * 16;
constexpr size_t kRowBytes = kRowWords * 2;
constexpr int kReadsPerThread = 20000;
constexpr int kRounds = 5;

json contract() {
  return {{"artifact_id", "vae_latent.current"},
          {"sample_count", kSamples},
          {"keyspace_fingerprint", "bench"},
          {"key_codec", "sample_int_v1"},
          {"dependencies", {{"producer", "bench"}}},
          {"values", {{"latent", {{"dtype", "bfloat16"}, {"shape", {48, 3, 24, 16}}}}}},
          {"value_codec", "raw"}};
}

// Plain pread of the same rows: its own descriptors, offsets taken from HDF5.
struct PlainFiles {
  std::vector<int> fds;
  std::vector<int64_t> offsets;

  explicit PlainFiles(const std::string& build_dir) {
    for (int64_t shard = 0; shard * kShardRows < kSamples; ++shard) {
      char name[64];
      std::snprintf(name, sizeof(name), "/shards/shard%06lld.h5", static_cast<long long>(shard));
      const std::string path = build_dir + name;
      const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      const hid_t dataset = H5Dopen2(file, "values/latent", H5P_DEFAULT);
      offsets.push_back(static_cast<int64_t>(H5Dget_offset(dataset)));
      H5Dclose(dataset);
      H5Fclose(file);
      fds.push_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (fds.back() < 0 || offsets.back() <= 0) {
        std::fprintf(stderr, "cannot open %s\n", path.c_str());
        std::exit(1);
      }
    }
  }
  ~PlainFiles() {
    for (int fd : fds) ::close(fd);
  }
  void read(int64_t sample_id, void* dst) const {
    const int64_t shard = sample_id / kShardRows;
    const int64_t offset = offsets[shard] + (sample_id % kShardRows) * kRowBytes;
    if (::pread(fds[shard], dst, kRowBytes, offset) != static_cast<ssize_t>(kRowBytes)) {
      std::fprintf(stderr, "short pread\n");
      std::exit(1);
    }
  }
};

// H5Dread of one row per call through HDF5's global lock.
struct Hdf5Rows {
  std::vector<hid_t> files;
  std::vector<hid_t> datasets;

  explicit Hdf5Rows(const std::string& build_dir) {
    for (int64_t shard = 0; shard * kShardRows < kSamples; ++shard) {
      char name[64];
      std::snprintf(name, sizeof(name), "/shards/shard%06lld.h5", static_cast<long long>(shard));
      files.push_back(H5Fopen((build_dir + name).c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
      datasets.push_back(H5Dopen2(files.back(), "values/latent", H5P_DEFAULT));
    }
  }
  ~Hdf5Rows() {
    for (hid_t dataset : datasets) H5Dclose(dataset);
    for (hid_t file : files) H5Fclose(file);
  }
  void read(int64_t sample_id, void* dst) const {
    const hid_t dataset = datasets[sample_id / kShardRows];
    const hsize_t start[5] = {static_cast<hsize_t>(sample_id % kShardRows), 0, 0, 0, 0};
    const hsize_t count[5] = {1, 48, 3, 24, 16};
    const hsize_t words = kRowWords;
    const hid_t file_space = H5Dget_space(dataset);
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    const hid_t memory_space = H5Screate_simple(1, &words, nullptr);
    const herr_t status =
        H5Dread(dataset, H5T_NATIVE_UINT16, memory_space, file_space, H5P_DEFAULT, dst);
    H5Sclose(memory_space);
    H5Sclose(file_space);
    if (status < 0) {
      std::fprintf(stderr, "H5Dread failed\n");
      std::exit(1);
    }
  }
};

double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec + now.tv_nsec * 1e-9;
}

struct Measurement {
  double samples_per_s = 0;
  double cores_used = 0;  // CPU seconds of the reading threads / wall seconds
  // CPU microseconds per row of the reading threads: what a read costs, whatever share of the
  // cores the other processes left (the samples/s of a loaded machine follow that share).
  double cpu_us_per_row = 0;
};

// `threads` threads each reading kReadsPerThread random rows.
Measurement measure(int threads, const std::function<void(int64_t, void*)>& read_row) {
  std::vector<std::vector<int64_t>> ids(threads);
  for (int t = 0; t < threads; ++t) {
    std::mt19937_64 random(1234 + t);
    std::uniform_int_distribution<int64_t> sample(0, kSamples - 1);
    for (int i = 0; i < kReadsPerThread; ++i) ids[t].push_back(sample(random));
  }
  std::vector<uint64_t> checksums(threads, 0);
  std::vector<double> cpu_seconds(threads, 0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<uint16_t> row(kRowWords);
      const double cpu_start = thread_cpu_seconds();
      for (int64_t id : ids[t]) {
        read_row(id, row.data());
        checksums[t] += row[id % kRowWords];
      }
      cpu_seconds[t] = thread_cpu_seconds() - cpu_start;
    });
  }
  for (auto& thread : pool) thread.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  uint64_t checksum = 0;
  for (uint64_t c : checksums) checksum += c;
  if (checksum == 42) std::printf(" ");  // keeps the reads observable
  double cpu = 0;
  for (double c : cpu_seconds) cpu += c;
  return {threads * kReadsPerThread / seconds, cpu / seconds,
          cpu * 1e6 / (threads * kReadsPerThread)};
}

// The round of median samples/s, with the median CPU time per row of all rounds.
Measurement median(std::vector<Measurement> values) {
  std::vector<double> cpu;
  for (const Measurement& m : values) cpu.push_back(m.cpu_us_per_row);
  std::sort(cpu.begin(), cpu.end());
  std::sort(values.begin(), values.end(), [](const Measurement& a, const Measurement& b) {
    return a.samples_per_s < b.samples_per_s;
  });
  Measurement middle = values[values.size() / 2];
  middle.cpu_us_per_row = cpu[cpu.size() / 2];
  return middle;
}

}  // namespace

int main(int argc, char** argv) {
  std::string base = argc > 1 ? argv[1] : fs::temp_directory_path().string();
  std::string pattern = base + "/wam-latent-bench-XXXXXX";
  const std::string root = ::mkdtemp(pattern.data());

  const auto write_start = std::chrono::steady_clock::now();
  {
    ArtifactBuilder builder(root, contract(), "bench");
    std::vector<uint16_t> rows(kShardRows * kRowWords);
    for (int64_t shard = 0; shard * kShardRows < kSamples; ++shard) {
      std::vector<int64_t> ids;
      for (int64_t row = 0; row < kShardRows; ++row) {
        const int64_t id = shard * kShardRows + row;
        ids.push_back(id);
        for (size_t i = 0; i < kRowWords; ++i) {
          rows[row * kRowWords + i] = static_cast<uint16_t>(id * 2654435761u + i);
        }
      }
      builder.write_shard(shard, ids, {{"latent", rows.data(), rows.size() * 2, {}}});
    }
    builder.publish(false);
  }
  const double write_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - write_start).count();

  const auto reader = wam::cache::open_artifact(root, contract());
  const PlainFiles plain(root + "/artifacts/vae_latent.current/builds/bench");
  const Hdf5Rows hdf5(root + "/artifacts/vae_latent.current/builds/bench");
  const auto hdf5_read = [&](int64_t id, void* dst) { hdf5.read(id, dst); };
  const auto store_read = [&](int64_t id, void* dst) { reader->read_fixed(id, 0, dst); };
  const auto plain_read = [&](int64_t id, void* dst) { plain.read(id, dst); };
  const auto hashed_read = [&](int64_t id, void* dst) {
    plain.read(id, dst);
    // Compared, so that the checksum is not optimised away; 0 for a real row is a 2^-32 chance.
    if (wam::cache::row_checksum(id, dst, kRowBytes) == 0) std::abort();
  };

  // Warm pass: every row once, through both paths, and a check that they agree.
  std::vector<uint16_t> a(kRowWords), b(kRowWords);
  for (int64_t id = 0; id < kSamples; ++id) {
    store_read(id, a.data());
    plain_read(id, b.data());
    if (a != b) break;
    hdf5_read(id, b.data());
    if (a != b || a[7] != static_cast<uint16_t>(id * 2654435761u + 7)) {
      std::fprintf(stderr, "sample %lld differs between the store and pread\n",
                   static_cast<long long>(id));
      return 1;
    }
  }

  // Per reader, per thread count (1, 2): the measurements of every round.
  const std::vector<std::pair<const char*, std::function<void(int64_t, void*)>>> readers = {
      {"store", store_read},
      {"pread", plain_read},
      {"pread+crc32c", hashed_read},
      {"hdf5", hdf5_read}};
  std::vector<std::vector<std::vector<Measurement>>> rounds(
      readers.size(), std::vector<std::vector<Measurement>>(2));
  for (int round = 0; round < kRounds; ++round) {
    for (size_t r = 0; r < readers.size(); ++r) {
      for (int threads = 1; threads <= 2; ++threads) {
        rounds[r][threads - 1].push_back(measure(threads, readers[r].second));
      }
    }
  }
  std::printf(
      "latent store read benchmark: %lld samples of bf16 [48,3,24,16] (%zu bytes), "
      "%lld shards, page cache warm, %u hardware threads\n",
      static_cast<long long>(kSamples), kRowBytes, static_cast<long long>(kSamples / kShardRows),
      std::thread::hardware_concurrency());
  std::printf("write+publish (full validation): %.2f s, %.0f samples/s\n", write_s,
              kSamples / write_s);
  std::printf("%-12s %8s %12s %7s %10s %11s %13s\n", "reader", "threads", "samples/s", "cores",
              "vs pread", "CPU us/row", "CPU vs pread");
  std::vector<std::vector<Measurement>> medians(readers.size());
  for (size_t r = 0; r < readers.size(); ++r) {
    for (int t = 0; t < 2; ++t) medians[r].push_back(median(rounds[r][t]));
  }
  for (size_t r = 0; r < readers.size(); ++r) {
    for (int t = 0; t < 2; ++t) {
      std::printf("%-12s %8d %12.0f %7.2f %10.3f %11.2f %13.3f\n", readers[r].first, t + 1,
                  medians[r][t].samples_per_s, medians[r][t].cores_used,
                  medians[r][t].samples_per_s / medians[1][t].samples_per_s,
                  medians[r][t].cpu_us_per_row,
                  medians[1][t].cpu_us_per_row / medians[r][t].cpu_us_per_row);
    }
  }
  for (size_t r = 0; r < readers.size(); ++r) {
    std::printf("%s: 2 threads / 1 thread = %.3f\n", readers[r].first,
                medians[r][1].samples_per_s / medians[r][0].samples_per_s);
  }
  std::printf(
      "(cores: CPU seconds of the reading threads per wall second; below the thread "
      "count, other processes held the cores)\n");
  const Measurement& s2 = medians[0][1];
  std::printf("store GB/s (2 threads): %.2f; reader counted %llu rows, %llu bytes\n",
              s2.samples_per_s * kRowBytes / 1e9,
              static_cast<unsigned long long>(reader->rows_read()),
              static_cast<unsigned long long>(reader->bytes_read()));
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
