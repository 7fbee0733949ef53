#include "common/distributed.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <mutex>

#include <torch/cuda.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if WAM_DIST_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if WAM_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "wam/error.h"

namespace wam::dist {
namespace {

// LibTorch 2 runs collectives on a c10d::Backend; 1.13's backends are ProcessGroups themselves.
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

constexpr int64_t kDefaultTimeoutS = 1800;
constexpr int kDefaultMasterPort = 29500;

std::optional<long long> parse_integer(const char* text) {
  if (!text || !*text) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

// The variable as an integer in [min, max]; `fallback` when unset, an error when required.
int integer_variable(const std::function<const char*(const char*)>& get, const char* name,
                     long long min, long long max, std::optional<int> fallback) {
  const char* text = get(name);
  if (!text || !*text) {
    if (fallback) return *fallback;
    throw Error(std::string(name) + " is not set; the launcher (torchrun, Slurm, scripts/run.sh) " +
                "sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every process");
  }
  const std::optional<long long> value = parse_integer(text);
  if (!value || *value < min || *value > max) {
    throw Error(std::string(name) + "=\"" + text + "\" is not an integer in [" +
                std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return static_cast<int>(*value);
}

[[maybe_unused]] bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

LaunchEnv parse_launch_env(const std::function<const char*(const char*)>& get) {
  LaunchEnv env;
  env.world_size = integer_variable(get, "WORLD_SIZE", 1, INT_MAX, 1);
  env.local_rank = integer_variable(get, "LOCAL_RANK", 0, INT_MAX, 0);
  auto text_of = [&get](const char* name) {
    const char* text = get(name);
    return std::string(text ? text : "");
  };
  const std::string addr = text_of("MASTER_ADDR");
  if (env.world_size == 1) {
    env.rank = integer_variable(get, "RANK", 0, 0, 0);
    if (addr.empty() || text_of("WORLD_SIZE").empty()) return env;
    env.master_addr = addr;
    env.master_port = integer_variable(get, "MASTER_PORT", 1, 65535, kDefaultMasterPort);
    return env;
  }
  env.rank = integer_variable(get, "RANK", 0, INT_MAX, std::nullopt);
  if (env.rank >= env.world_size) {
    throw Error("RANK=" + std::to_string(env.rank) +
                " must be < WORLD_SIZE=" + std::to_string(env.world_size));
  }
  if (addr.empty()) {
    throw Error("MASTER_ADDR is not set; with WORLD_SIZE=" + std::to_string(env.world_size) +
                " every rank needs the address of rank 0 (MASTER_ADDR and MASTER_PORT)");
  }
  env.master_addr = addr;
  env.master_port = integer_variable(get, "MASTER_PORT", 1, 65535, kDefaultMasterPort);
  return env;
}

const LaunchEnv& launch_env() {
  static const LaunchEnv env = parse_launch_env([](const char* name) { return std::getenv(name); });
  return env;
}

std::chrono::seconds collective_timeout() {
  static const std::chrono::seconds timeout = [] {
    const char* text = std::getenv("WAM_DIST_TIMEOUT_S");
    if (!text || !*text) return std::chrono::seconds(kDefaultTimeoutS);
    const std::optional<long long> value = parse_integer(text);
    if (!value || *value < 1) {
      throw Error(std::string("WAM_DIST_TIMEOUT_S=\"") + text +
                  "\" must be a positive integer (seconds)");
    }
    return std::chrono::seconds(*value);
  }();
  return timeout;
}

struct World::Groups {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> gloo;
#if WAM_WITH_CUDA
  c10::intrusive_ptr<Backend> nccl;
#endif
  Backend& for_tensors(const std::vector<at::Tensor>& tensors) {
#if WAM_WITH_CUDA
    if (!tensors.empty() && tensors.front().is_cuda()) return *nccl;
#endif
    return cpu();
  }
  // Barriers and CPU tensors: Gloo; NCCL where the build has no Gloo headers (all_reduce then
  // stages CPU tensors through the GPU).
  Backend& cpu() {
    if (gloo) return *gloo;
#if WAM_WITH_CUDA
    if (nccl) return *nccl;
#endif
    throw Error(
        "this build has no Gloo (libgloo-dev headers were not found at configure time), "
        "so CPU tensors cannot be reduced across ranks");
  }
};

struct Pending::Impl {
  c10::intrusive_ptr<c10d::Work> work;
  std::vector<at::Tensor> tensors;  // kept alive until the collective is done
  std::string what;
  const World* world = nullptr;
  bool on_device = false;            // CUDA tensors: a stream-ordered wait
  std::vector<at::Tensor> host_out;  // CPU tensors reduced through the GPU: copied back on wait
};

void Pending::wait() {
  if (!impl_) return;
  std::shared_ptr<Impl> impl = std::move(impl_);
  if (!impl->work) return;
  try {
    if (impl->on_device) {
      // NCCL: the caller's stream waits for the collective, the host does not (so it can be
      // captured in a CUDA graph); ProcessGroupNCCL's watchdog enforces the timeout.
      impl->work->wait();
    } else {
      impl->work->wait(std::chrono::duration_cast<std::chrono::milliseconds>(collective_timeout()));
    }
    for (size_t i = 0; i < impl->host_out.size(); ++i) impl->host_out[i].copy_(impl->tensors[i]);
  } catch (const std::exception& e) {
    throw Error(impl->world->describe() + ": " + impl->what + " failed: " + e.what() +
                " (a peer rank exited or hangs; collectives give up after WAM_DIST_TIMEOUT_S=" +
                std::to_string(collective_timeout().count()) + " s)");
  }
}

namespace {
std::atomic<int> g_alone{0};
}  // namespace

AloneScope::AloneScope() { g_alone.fetch_add(1); }
AloneScope::~AloneScope() { g_alone.fetch_sub(1); }

World& World::get() {
  if (g_alone.load() > 0) {
    static World alone{LaunchEnv{}};
    return alone;
  }
  static World world(launch_env());
  return world;
}

World::World(const LaunchEnv& env) : rank_(env.rank), size_(env.world_size) {
  if (!env.launched()) return;
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(collective_timeout());
  groups_ = std::make_unique<Groups>();
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = env.rank == 0;
    options.numWorkers = static_cast<size_t>(env.world_size);
    options.waitWorkers = true;
    options.timeout = timeout;
    groups_->store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
  } catch (const std::exception& e) {
    throw Error(
        describe() + ": rendezvous at MASTER_ADDR:MASTER_PORT=" + where +
        " failed within WAM_DIST_TIMEOUT_S=" + std::to_string(collective_timeout().count()) +
        " s (" + (env.rank == 0 ? "are all WORLD_SIZE ranks started?" : "is rank 0 up?") +
        "): " + e.what());
  }
  try {
#if WAM_DIST_GLOO
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(timeout);
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else if (is_loopback(env.master_addr)) {
      gloo_options->devices.push_back(
          c10d::ProcessGroupGloo::createDeviceForHostname(env.master_addr));
    } else {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    groups_->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>("gloo", groups_->store), rank_, size_, gloo_options);
#endif
#if WAM_WITH_CUDA
    if (torch::cuda::is_available()) {
      // NCCL takes one device per process; set_device's own error ("invalid device ordinal")
      // would not say which setting is wrong.
      const int64_t devices = static_cast<int64_t>(torch::cuda::device_count());
      if (env.local_rank >= devices) {
        throw Error("LOCAL_RANK " + std::to_string(env.local_rank) + " needs CUDA device " +
                    std::to_string(env.local_rank) + ", but this machine shows " +
                    std::to_string(devices) +
                    ": start at most that many processes per node (torchrun --nproc-per-node), "
                    "or hide the GPUs (CUDA_VISIBLE_DEVICES=) to run the ranks on the CPU");
      }
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(env.local_rank));
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = timeout;
      groups_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          c10::make_intrusive<c10d::PrefixStore>("nccl", groups_->store), rank_, size_,
          nccl_options);
    }
#endif
  } catch (const std::exception& e) {
    throw Error(describe() + ": creating the process group at " + where + " failed: " + e.what());
  }
}

World::~World() = default;

std::string World::describe() const {
  return "rank " + std::to_string(rank_) + "/" + std::to_string(size_);
}

void World::fail(std::string_view what, const std::exception& e) const {
  throw Error(describe() + ": " + std::string(what) + " failed: " + e.what() +
              " (a peer rank exited or hangs; collectives give up after WAM_DIST_TIMEOUT_S=" +
              std::to_string(collective_timeout().count()) + " s)");
}

void World::broadcast(std::vector<at::Tensor>& tensors, int root, std::string_view what) {
  if (!distributed() || tensors.empty()) return;
  try {
    c10d::BroadcastOptions options;
    options.rootRank = root;
    options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(collective_timeout());
    // One collective per tensor: Gloo broadcasts one tensor per call (per device).
    for (at::Tensor& tensor : tensors) {
      std::vector<at::Tensor> one{tensor};
      groups_->for_tensors(one).broadcast(one, options)->wait();
    }
  } catch (const std::exception& e) {
    fail(what, e);
  }
}

Pending World::all_reduce_sum_async(std::vector<at::Tensor> tensors, std::string what) {
  Pending pending;
  if (!distributed() || tensors.empty()) return pending;
  pending.impl_ = std::make_shared<Pending::Impl>();
  pending.impl_->what = std::move(what);
  pending.impl_->world = this;
  pending.impl_->tensors = std::move(tensors);
  try {
#if WAM_WITH_CUDA
    if (!groups_->gloo && !pending.impl_->tensors.front().is_cuda()) {
      // Only NCCL, which reduces device memory: CPU tensors go through this rank's GPU.
      pending.impl_->host_out = pending.impl_->tensors;
      for (at::Tensor& t : pending.impl_->tensors) t = t.to(at::kCUDA);
    }
#endif
    pending.impl_->on_device = pending.impl_->tensors.front().is_cuda();
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(collective_timeout());
    pending.impl_->work =
        groups_->for_tensors(pending.impl_->tensors).allreduce(pending.impl_->tensors, options);
  } catch (const std::exception& e) {
    fail(pending.impl_->what, e);
  }
  return pending;
}

void World::all_reduce_sum(std::vector<at::Tensor> tensors, std::string_view what) {
  all_reduce_sum_async(std::move(tensors), std::string(what)).wait();
}

void World::barrier(std::string_view what) {
  if (!distributed()) return;
  try {
    c10d::BarrierOptions options;
    options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(collective_timeout());
    groups_->cpu().barrier(options)->wait();
  } catch (const std::exception& e) {
    fail(what, e);
  }
}

void World::store_set(const std::string& key, const std::string& value) {
  if (!distributed()) return;
  groups_->store->set("wam/" + key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::optional<std::string> World::store_get_now(const std::string& key) {
  if (!distributed()) return std::nullopt;
  try {
    if (!groups_->store->check({"wam/" + key})) return std::nullopt;
    const std::vector<uint8_t> value = groups_->store->get("wam/" + key);
    return std::string(value.begin(), value.end());
  } catch (const std::exception&) {
    return std::nullopt;  // the store's host (rank 0) is gone
  }
}

void test_exit_point(std::string_view point) {
  const char* spec = std::getenv("WAM_DIST_TEST_EXIT");
  if (!spec) return;
  const std::string expected = std::to_string(launch_env().rank) + ":" + std::string(point);
  if (expected == spec) _exit(137);
}

}  // namespace wam::dist
