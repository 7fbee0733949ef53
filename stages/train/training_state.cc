#include "train/training_state.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "models/weights_file.h"
#include "wam/atomic_file.h"
#include "wam/error.h"

namespace wam::train {
namespace fs = std::filesystem;

namespace {

// What a training-state file holds: the model's parameters and buffers by name, the optimizer's
// moments by parameter name, and the progress; the metadata names the format and the model config.
constexpr const char* kFormat = "wam-pipeline training state 1";
const std::string kModelPrefix = "model.";
const std::string kExpAvgPrefix = "optimizer.exp_avg.";
const std::string kExpAvgSqPrefix = "optimizer.exp_avg_sq.";
const std::string kOptimizerStep = "optimizer.step";
const std::string kProgressStep = "progress.step";
const std::string kNoiseRngState = "progress.noise_rng_state";

// Keys are indices: archive keys may not contain the dots of parameter names. The names are
// stored too and compared on load.
std::string joined_names(const torch::OrderedDict<std::string, at::Tensor>& items) {
  std::string names;
  for (const auto& item : items) names += item.key() + "\n";
  return names;
}

std::string read_string(torch::serialize::InputArchive& archive, const std::string& key,
                        const std::string& path) {
  c10::IValue value;
  if (!archive.try_read(key, value) || !value.isString()) {
    throw Error(
        "checkpoint " + path + " has no \"" + key +
        "\": it was not written by TrainStep; pass a step_<N>.safetensors file or its directory");
  }
  return value.toStringRef();
}

at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& key,
                       const std::string& path) {
  at::Tensor tensor;
  if (!archive.try_read(key, tensor)) {
    throw Error("checkpoint " + path + " has no tensor \"" + key + "\"; it is incomplete");
  }
  return tensor;
}

void copy_into(at::Tensor& target, const at::Tensor& loaded, const std::string& what,
               const std::string& path) {
  if (target.sizes() != loaded.sizes()) {
    std::ostringstream message;
    message << "checkpoint " << path << ": " << what << " has shape " << loaded.sizes()
            << ", the model has " << target.sizes();
    throw Error(message.str());
  }
  torch::NoGradGuard no_grad;
  target.copy_(loaded);
}

// Files of the earlier format (step_<N>.pt, a LibTorch archive), so that runs saved before the
// switch to safetensors still resume.
TrainProgress load_torch_archive(const std::string& file, models::WorldActionModel& model,
                                 AdamW& optimizer) {
  torch::serialize::InputArchive archive;
  archive.load_from(file, at::Device(at::kCPU));

  const std::string saved_config = read_string(archive, "model_config", file);
  const std::string config = model->config().to_json().dump();
  if (saved_config != config) {
    throw Error("resume: checkpoint " + file + " was written for model config " + saved_config +
                ", this run's is " + config + "; resume with the same model preset");
  }
  auto parameters = model->named_parameters();
  auto buffers = model->named_buffers();
  if (read_string(archive, "parameter_names", file) != joined_names(parameters) ||
      read_string(archive, "buffer_names", file) != joined_names(buffers)) {
    throw Error("resume: checkpoint " + file +
                " names other parameters than this model; resume with the same model code");
  }
  for (size_t i = 0; i < parameters.size(); ++i) {
    const std::string index = std::to_string(i);
    const std::string& name = parameters[i].key();
    copy_into(parameters[i].value(), read_tensor(archive, "parameter_" + index, file), name, file);
    at::Tensor exp_avg = optimizer.exp_avg()[i];
    at::Tensor exp_avg_sq = optimizer.exp_avg_sq()[i];
    copy_into(exp_avg, read_tensor(archive, "exp_avg_" + index, file), name + " exp_avg", file);
    copy_into(exp_avg_sq, read_tensor(archive, "exp_avg_sq_" + index, file), name + " exp_avg_sq",
              file);
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    copy_into(buffers[i].value(), read_tensor(archive, "buffer_" + std::to_string(i), file),
              buffers[i].key(), file);
  }
  at::Tensor optimizer_step = optimizer.step_tensor();
  copy_into(optimizer_step, read_tensor(archive, "optimizer_step", file), "optimizer step", file);

  TrainProgress progress;
  progress.step = read_tensor(archive, "step", file).item<int64_t>();
  progress.noise_rng_state = read_tensor(archive, "noise_rng_state", file);
  return progress;
}

TrainProgress load_safetensors_state(const std::string& file, models::WorldActionModel& model,
                                     AdamW& optimizer) {
  const safetensors::Reader reader(file);
  const auto format = reader.metadata().find("format");
  if (format == reader.metadata().end() || format->second != kFormat) {
    throw Error("resume: " + file +
                " is not a training-state file written by TrainStep; pass a step_<N>.safetensors "
                "file or its directory");
  }
  const std::string config = model->config().to_json().dump();
  const std::string& saved_config = reader.metadata().at("model_config");
  if (saved_config != config) {
    throw Error("resume: checkpoint " + file + " was written for model config " + saved_config +
                ", this run's is " + config + "; resume with the same model preset");
  }
  const auto tensor = [&](const std::string& name) {
    const safetensors::TensorInfo* info = reader.find(name);
    if (info == nullptr) {
      throw Error("checkpoint " + file + " has no tensor \"" + name + "\"; it is incomplete");
    }
    return models::read_tensor(reader, *info);
  };
  models::load_module_weights(*model, file, kModelPrefix);
  const auto parameters = model->named_parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    const std::string& name = parameters[i].key();
    at::Tensor exp_avg = optimizer.exp_avg()[i], exp_avg_sq = optimizer.exp_avg_sq()[i];
    copy_into(exp_avg, tensor(kExpAvgPrefix + name), name + " exp_avg", file);
    copy_into(exp_avg_sq, tensor(kExpAvgSqPrefix + name), name + " exp_avg_sq", file);
  }
  at::Tensor optimizer_step = optimizer.step_tensor();
  copy_into(optimizer_step, tensor(kOptimizerStep), "optimizer step", file);
  TrainProgress progress;
  progress.step = tensor(kProgressStep).item<int64_t>();
  progress.noise_rng_state = tensor(kNoiseRngState);
  return progress;
}

}  // namespace

std::string save_training_state(const std::string& dir, const models::WorldActionModel& model,
                                const AdamW& optimizer, const TrainProgress& progress) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  // The model under "model.": models::load_module_weights(module, file, "model.") initialises
  // a model from a training-state file as from published weights.
  for (const auto& item : model->named_parameters()) {
    tensors.emplace_back(kModelPrefix + item.key(), item.value());
  }
  for (const auto& item : model->named_buffers()) {
    tensors.emplace_back(kModelPrefix + item.key(), item.value());
  }
  const auto parameters = model->named_parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    tensors.emplace_back(kExpAvgPrefix + parameters[i].key(), optimizer.exp_avg()[i]);
    tensors.emplace_back(kExpAvgSqPrefix + parameters[i].key(), optimizer.exp_avg_sq()[i]);
  }
  tensors.emplace_back(kOptimizerStep, optimizer.step_tensor());
  tensors.emplace_back(kProgressStep, torch::tensor(progress.step, at::kLong));
  tensors.emplace_back(kNoiseRngState, progress.noise_rng_state);

  const std::string name = "step_" + std::to_string(progress.step) + ".safetensors";
  const std::string path = (fs::path(dir) / name).string();
  models::save_safetensors(
      path, tensors, {{"format", kFormat}, {"model_config", model->config().to_json().dump()}});
  write_file_atomically((fs::path(dir) / "latest").string(), name + "\n");
  return path;
}

TrainProgress load_training_state(const std::string& path, models::WorldActionModel& model,
                                  AdamW& optimizer) {
  std::string file = path;
  if (fs::is_directory(path)) {
    const fs::path pointer = fs::path(path) / "latest";
    std::ifstream in(pointer);
    std::string name;
    if (!(in >> name)) {
      throw Error(
          "resume: " + pointer.string() +
          " is missing or empty; pass a step_<N>.safetensors file instead of the directory");
    }
    file = (fs::path(path) / name).string();
  }
  if (!fs::is_regular_file(file)) {
    throw Error("resume: checkpoint " + file + " does not exist");
  }
  return fs::path(file).extension() == ".pt" ? load_torch_archive(file, model, optimizer)
                                             : load_safetensors_state(file, model, optimizer);
}

}  // namespace wam::train
