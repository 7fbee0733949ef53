#include "wam/tensor.h"

#include <sstream>

namespace wam {

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
