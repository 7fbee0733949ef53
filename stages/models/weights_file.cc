#include "models/weights_file.h"

#include <array>
#include <set>
#include <sstream>

#include "wam/atomic_file.h"
#include "wam/error.h"

namespace wam::models {
namespace {

namespace st = safetensors;

constexpr std::array<std::pair<at::ScalarType, st::DType>, 10> kDTypes = {{
    {at::kBool, st::DType::kBool},
    {at::kByte, st::DType::kU8},
    {at::kChar, st::DType::kI8},
    {at::kShort, st::DType::kI16},
    {at::kInt, st::DType::kI32},
    {at::kLong, st::DType::kI64},
    {at::kHalf, st::DType::kF16},
    {at::kBFloat16, st::DType::kBF16},
    {at::kFloat, st::DType::kF32},
    {at::kDouble, st::DType::kF64},
}};

st::DType file_dtype(at::ScalarType dtype, const std::string& name, const std::string& path) {
  for (const auto& [torch_dtype, file] : kDTypes) {
    if (torch_dtype == dtype) return file;
  }
  throw Error(path + ": tensor \"" + name + "\" is " + c10::toString(dtype) +
              ", which safetensors files cannot hold");
}

at::ScalarType torch_dtype(st::DType dtype) {
  for (const auto& [torch_dtype, file] : kDTypes) {
    if (file == dtype) return torch_dtype;
  }
  throw Error("safetensors: no LibTorch dtype for " + std::string(st::dtype_name(dtype)));
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << at::IntArrayRef(shape);
  return out.str();
}

// "N: a, b, c" with at most ten names listed.
std::string listed(const std::vector<std::string>& names) {
  std::string text = std::to_string(names.size()) + ": ";
  for (size_t i = 0; i < names.size() && i < 10; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 10) text += ", and " + std::to_string(names.size() - 10) + " more";
  return text;
}

}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> on_host;  // alive until written
  std::vector<st::TensorData> entries;
  on_host.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    on_host.push_back(tensor.detach().to(at::kCPU).contiguous());
    const at::Tensor& host = on_host.back();
    entries.push_back(
        {name, file_dtype(host.scalar_type(), name, path), host.sizes().vec(), host.data_ptr()});
  }
  AtomicFile file(path);
  st::write(entries, metadata, [&](std::string_view bytes) { file.write(bytes); });
  file.publish();
}

at::Tensor read_tensor(const st::Reader& reader, const st::TensorInfo& info) {
  at::Tensor tensor = at::empty(info.shape, at::TensorOptions().dtype(torch_dtype(info.dtype)));
  if (info.bytes() > 0) reader.read(info, tensor.data_ptr());
  return tensor;
}

void load_module_weights(torch::nn::Module& module, const std::string& path,
                         const std::string& prefix) {
  const st::Reader reader(path);
  std::vector<std::pair<at::Tensor, const st::TensorInfo*>> copies;
  std::vector<std::string> missing, mis_shaped, unexpected;
  std::set<std::string> matched;
  const auto match = [&](const std::string& name, const at::Tensor& target) {
    const st::TensorInfo* info = reader.find(prefix + name);
    if (info == nullptr) {
      missing.push_back(prefix + name);
      return;
    }
    matched.insert(info->name);
    if (info->shape != target.sizes().vec()) {
      mis_shaped.push_back(prefix + name + " (file " + shape_text(info->shape) + ", model " +
                           shape_text(target.sizes().vec()) + ")");
      return;
    }
    copies.emplace_back(target, info);
  };
  for (const auto& item : module.named_parameters()) match(item.key(), item.value());
  for (const auto& item : module.named_buffers()) match(item.key(), item.value());
  for (const st::TensorInfo& info : reader.tensors()) {
    if (info.name.rfind(prefix, 0) == 0 && matched.count(info.name) == 0) {
      unexpected.push_back(info.name);
    }
  }
  if (!missing.empty() || !mis_shaped.empty() || !unexpected.empty()) {
    std::vector<std::string> problems;
    if (!missing.empty()) problems.push_back("missing " + listed(missing));
    if (!unexpected.empty()) problems.push_back("unexpected " + listed(unexpected));
    if (!mis_shaped.empty()) problems.push_back("mis-shaped " + listed(mis_shaped));
    throw Error(path + ": the weights do not fit the model: " + join(problems, "; "));
  }
  torch::NoGradGuard no_grad;
  for (auto& [target, info] : copies) target.copy_(read_tensor(reader, *info));
}

}  // namespace wam::models
