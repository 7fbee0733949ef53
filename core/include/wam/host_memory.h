// The run's host memory budget (settings.host_memory_gib): the samples in flight and the stages'
// own buffers (frame caches, decoder sessions, staging buffers) share it. Stages claim their
// buffers through Context::host_memory() before sizing them; the runner measures the samples and
// lowers the in-flight limit to what is left. docs/RELIABILITY.md, "Host memory".
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wam/sample.h"

namespace wam {

// Bytes of host memory a sample's tensors hold (their whole storages: a view holds its base).
// Core is torch-free: the tensor library (wam/tensor.h) installs the counter of one tensor's
// bytes; without it tensors count nothing.
using TensorBytesCounter = int64_t (*)(const at::Tensor&);
void set_tensor_bytes_counter(TensorBytesCounter counter);
int64_t sample_host_bytes(const Sample& sample);

// MemTotal of /proc/meminfo's text, in bytes; nothing when absent.
std::optional<int64_t> parse_meminfo_total(std::string_view meminfo);
// A cgroup memory limit file's text (v2 memory.max, v1 memory.limit_in_bytes), in bytes; nothing
// for "max" or an unreadable value.
std::optional<int64_t> parse_cgroup_limit(std::string_view text);
// The memory this process may use: the smaller of MemTotal and its cgroup's limit; 0 when neither
// is readable.
int64_t machine_memory_bytes();
// settings.host_memory_gib's auto value for a machine of `machine_bytes`.
int64_t auto_host_memory_bytes(int64_t machine_bytes);
// "1.46 GiB", "10.5 MiB", "512 KiB".
std::string format_bytes(int64_t bytes);

// Has glibc's malloc keep blocks of up to 64 MiB in its heaps and reuse them, where by default it
// maps each block above its threshold (128 KiB, raised to the largest block freed, at most 32 MiB)
// with mmap and unmaps it when freed, and gives back a heap's free top above twice that: a
// sample's decoded frames, planes and canvases (2-30 MiB each) then arrive in fresh pages the
// kernel faults in and zeroes, about a second of system time per 96 RoboTwin samples on one core
// (docs/BENCHMARKS.md, "CPU data path per core"). The command line calls it at start; a user's
// own malloc settings (GLIBC_TUNABLES, MALLOC_*_ environment variables) are left alone. Returns
// whether it changed them.
bool keep_sample_buffers_in_the_heap();

class HostMemoryBudget {
 public:
  // `bytes` to share; `origin` says where the figure comes from ("auto: 1/32 of 23.4 GiB" or
  // "settings.host_memory_gib"). The in-flight limit stays within [min_in_flight, max_in_flight]:
  // the least the graph needs to go on (a batch and a sample per thread) and the settings' limit.
  HostMemoryBudget(int64_t bytes, std::string origin, int64_t min_in_flight, int64_t max_in_flight,
                   int64_t worker_threads);

  // The budget of a run's settings (`min_in_flight` as above); auto from this machine's memory.
  static HostMemoryBudget for_settings(double host_memory_gib, int64_t min_in_flight,
                                       int64_t max_in_flight, int64_t worker_threads);

  int64_t bytes() const { return bytes_; }
  int64_t worker_threads() const { return worker_threads_; }

  // A stage's buffers held for the run, `count` units of `unit_bytes` each (cached frames, decoder
  // sessions, staging buffers): grants as many as fit in half of the budget not claimed yet (the
  // samples in flight keep the rest), and at least `least` (what the stage cannot work without,
  // even over budget). Returns the units granted; the start line lists them as "N <what>".
  // Thread-safe.
  int64_t claim(const std::string& what, int64_t unit_bytes, int64_t count, int64_t least);

  // The runner's measure of one sample's host bytes at some point of the graph: the largest seen
  // sizes the in-flight limit. Thread-safe.
  void observe_sample(int64_t bytes);
  // The first sample reached a batching or terminal node: its size is known, the limit is lifted
  // from min_in_flight to what the budget allows. Returns true the first time only.
  bool settle();

  // Samples allowed in flight now: min_in_flight until settled.
  int64_t in_flight_limit() const;

  // "host memory budget 755 MiB (auto: 1/32 of the machine's 23.6 GiB): up to 30 samples of
  // 9.69 MiB in flight, 32 decoder sessions (169 MiB), 12 VAE frames encoded at once (288 MiB)"
  std::string start_line() const;

  // The in-flight limit `available` bytes give samples of `sample_bytes`, within [min, max].
  static int64_t samples_that_fit(int64_t available, int64_t sample_bytes, int64_t min,
                                  int64_t max);

 private:
  struct Claim {
    std::string what;
    int64_t units;
    int64_t bytes;
  };
  int64_t limit_locked() const;

  const int64_t bytes_;
  const std::string origin_;
  const int64_t min_in_flight_, max_in_flight_, worker_threads_;
  mutable std::mutex mutex_;
  std::vector<Claim> claims_;
  int64_t claimed_bytes_ = 0;
  int64_t sample_bytes_ = 0;
  bool settled_ = false;
  std::atomic<int64_t> limit_;
};

}  // namespace wam
