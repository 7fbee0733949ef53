#include "train/training_state.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "wam/atomic_file.h"
#include "wam/error.h"

namespace wam::train {
namespace fs = std::filesystem;

namespace {

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
    throw Error("checkpoint " + path + " has no \"" + key +
                "\": it was not written by TrainStep; pass a step_<N>.pt file or its directory");
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

}  // namespace

std::string save_training_state(const std::string& dir, const models::WorldActionModel& model,
                                const AdamW& optimizer, const TrainProgress& progress) {
  fs::create_directories(dir);
  torch::serialize::OutputArchive archive;
  archive.write("model_config", c10::IValue(model->config().to_json().dump()));
  const auto parameters = model->named_parameters();
  const auto buffers = model->named_buffers();
  archive.write("parameter_names", c10::IValue(joined_names(parameters)));
  archive.write("buffer_names", c10::IValue(joined_names(buffers)));
  for (size_t i = 0; i < parameters.size(); ++i) {
    archive.write("parameter_" + std::to_string(i), parameters[i].value().detach().cpu());
    archive.write("exp_avg_" + std::to_string(i), optimizer.exp_avg()[i].cpu());
    archive.write("exp_avg_sq_" + std::to_string(i), optimizer.exp_avg_sq()[i].cpu());
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    archive.write("buffer_" + std::to_string(i), buffers[i].value().cpu(), /*is_buffer=*/true);
  }
  archive.write("optimizer_step", optimizer.step_tensor().cpu());
  archive.write("step", torch::tensor(progress.step, at::kLong));
  archive.write("noise_rng_state", progress.noise_rng_state.cpu());

  const std::string name = "step_" + std::to_string(progress.step) + ".pt";
  const std::string path = (fs::path(dir) / name).string();
  AtomicFile file(path);
  archive.save_to(file.temporary());
  file.publish();
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
      throw Error("resume: " + pointer.string() +
                  " is missing or empty; pass a step_<N>.pt file instead of the directory");
    }
    file = (fs::path(path) / name).string();
  }
  if (!fs::is_regular_file(file)) {
    throw Error("resume: checkpoint " + file + " does not exist");
  }
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

}  // namespace wam::train
