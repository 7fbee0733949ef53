// Multi-process runs on LibTorch's c10d: the launcher's environment, the process group of this
// job (Gloo for CPU tensors; NCCL for CUDA tensors in CUDA builds) and the few collectives the
// stages need, each with a timeout and an error that names the rank and the operation.
//
// A launcher (torchrun, Slurm, scripts/run.sh) sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT; the ranks meet at a c10d::TCPStore served by rank 0 at MASTER_ADDR:MASTER_PORT.
// Without WORLD_SIZE the process is alone: no store, no process group, and every collective is a
// no-op. WORLD_SIZE=1 with MASTER_ADDR (torchrun --nproc-per-node 1) is a group of one that runs
// every collective, as DistributedDataParallel does on one GPU; without MASTER_ADDR it is alone.
//
// Collectives must be called in the same order on every rank. WAM_DIST_TIMEOUT_S (default 1800)
// bounds every rendezvous and collective: a rank that died or hangs fails the others' next
// collective within it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ATen/ATen.h>

namespace wam::dist {

// What the launcher says about this process.
struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  // A process group is made: several ranks, or one that a launcher started (MASTER_ADDR set).
  bool launched() const { return world_size > 1 || !master_addr.empty(); }
};

// Parses RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT from `get` (a getenv). With
// WORLD_SIZE unset or 1 the result is one process (rank 0, LOCAL_RANK still read; MASTER_ADDR too
// when WORLD_SIZE=1 is given). Throws
// wam::Error naming the first variable that is missing or malformed, e.g. "RANK=3 must be <
// WORLD_SIZE=2".
LaunchEnv parse_launch_env(const std::function<const char*(const char*)>& get);
// parse_launch_env(getenv), read once per process.
const LaunchEnv& launch_env();

// WAM_DIST_TIMEOUT_S (a positive integer; default 1800 s).
std::chrono::seconds collective_timeout();

// An all-reduce in flight.
class Pending {
 public:
  // Blocks until the result is in the tensors; throws wam::Error naming the rank and operation.
  void wait();
  bool valid() const { return impl_ != nullptr; }

 private:
  friend class World;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The process group of this job.
class World {
 public:
  // The process's world, created from launch_env() on first use (the rendezvous blocks until every
  // rank arrived or the timeout passed). Thread-safe.
  static World& get();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Collectives run (a launched job, of one rank or more); false: every collective is a no-op.
  bool distributed() const { return groups_ != nullptr; }
  // "rank 1/4"
  std::string describe() const;

  // Collectives over tensors of one device (CPU: Gloo; CUDA: NCCL). `what` names the operation in
  // errors, e.g. "broadcast of the initial weights".
  void broadcast(std::vector<at::Tensor>& tensors, int root, std::string_view what);
  Pending all_reduce_sum_async(std::vector<at::Tensor> tensors, std::string what);
  void all_reduce_sum(std::vector<at::Tensor> tensors, std::string_view what);
  void barrier(std::string_view what);

  // The rendezvous store, for small messages between ranks (e.g. which rank failed and why).
  void store_set(const std::string& key, const std::string& value);
  // The value, or nullopt when no rank set it (does not wait).
  std::optional<std::string> store_get_now(const std::string& key);

  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

 private:
  explicit World(const LaunchEnv& env);
  struct Groups;
  [[noreturn]] void fail(std::string_view what, const std::exception& e) const;

  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<Groups> groups_;
};

// While one lives, World::get() returns a world of this process alone (rank 0 of 1), e.g. for rank
// 0 of `wam-pipeline compile`, which runs training steps by itself while the other ranks wait.
class AloneScope {
 public:
  AloneScope();
  ~AloneScope();
  AloneScope(const AloneScope&) = delete;
  AloneScope& operator=(const AloneScope&) = delete;
};

// Test hook: when WAM_DIST_TEST_EXIT is "<rank>:<point>" and names this rank and `point`, the
// process ends at once with status 137, as a killed rank would (no destructor, no message to
// peers).
void test_exit_point(std::string_view point);

}  // namespace wam::dist
