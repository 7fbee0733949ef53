#include "wam/tensor.h"

#include <sstream>

#include "wam/host_memory.h"

namespace wam {
namespace {

// Host bytes a tensor holds: its whole storage (a view keeps its base alive); none on a device.
int64_t host_tensor_bytes(const at::Tensor& t) {
  if (!t.defined() || !t.is_cpu() || !t.has_storage()) return 0;
  return static_cast<int64_t>(t.storage().nbytes());
}

// Installed before main: every program that handles tensors links this file.
[[maybe_unused]] const bool kCounterInstalled = [] {
  set_tensor_bytes_counter(&host_tensor_bytes);
  return true;
}();

}  // namespace

const at::Tensor& Sample::tensor(std::string_view name) const { return *get_tensor_ptr(name); }

void Sample::set_tensor(std::string name, at::Tensor value) {
  set(std::move(name), std::make_shared<const at::Tensor>(std::move(value)));
}

std::string describe_tensor(const at::Tensor& t) {
  std::ostringstream out;
  out << c10::toString(t.scalar_type()) << t.sizes();
  return out.str();
}

}  // namespace wam
