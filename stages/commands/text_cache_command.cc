// `wam-pipeline text-cache build PIPELINE [--set ...]`: fills the HDF5 text cache that the
// pipeline's TextEmbed node reads, with the T5 prompt of every task of the datasets its
// EpisodeSampler nodes read.
// Under a launcher (common/distributed.h) rank 0 writes the file and the other ranks wait for it at
// a barrier, so that every rank may train from it next.
// Adds the `text-cache` command to `app`; after parsing, selected() says whether it was chosen and
// run() executes it, returning the process exit status.
#include "cli/command.h"

#include <iostream>
#include <set>

#include "common/distributed.h"
#include "data/dataset_sampler.h"
#include "encode/text_cache_user.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "models/text_encoder.h"
#include "wam/pipeline.h"

namespace wam::cli {
namespace {

// The T5 prompt of every task the pipeline's dataset samplers can emit, sorted.
std::vector<std::string> pipeline_prompts(const ValidatedPipeline& pipeline) {
  std::set<std::string> prompts;
  bool has_sampler = false;
  for (const ValidatedNode& node : pipeline.nodes()) {
    const auto* sampler = dynamic_cast<const stages::DatasetSampler*>(node.stage.get());
    if (!sampler) continue;
    has_sampler = true;
    for (const std::string& dir : sampler->dataset_dirs()) {
      const data::LeRobotDataset dataset = data::LeRobotDataset::open(dir);
      for (const auto& [index, task] : dataset.tasks()) {
        prompts.insert(data::instruction_prompt(task));
      }
      for (const data::EpisodeInfo& episode : dataset.episodes()) {
        for (const auto& task : episode.tasks) prompts.insert(data::instruction_prompt(task));
      }
    }
  }
  if (!has_sampler) {
    throw Error(pipeline.file() +
                ": no EpisodeSampler node, so no dataset tasks to encode; text-cache build reads "
                "the tasks of the datasets the pipeline samples");
  }
  return {prompts.begin(), prompts.end()};
}

}  // namespace

class TextCacheCommand final : public Command {
 public:
  static constexpr std::string_view kName = "text-cache";
  explicit TextCacheCommand(CLI::App& app);
  bool selected() const override;
  int run() override;

 private:
  int build();
  CLI::App* text_cache_ = nullptr;
  CLI::App* build_ = nullptr;
  std::string pipeline_;
  std::vector<std::string> overrides_;
};

TextCacheCommand::TextCacheCommand(CLI::App& app) {
  text_cache_ = app.add_subcommand("text-cache", "Fill the text embedding cache TextEmbed reads");
  text_cache_->require_subcommand(1);
  build_ = text_cache_->add_subcommand(
      "build",
      "Encode the T5 prompt of every task of the pipeline's datasets with the TextEmbed node's "
      "encoder and write its cache file (entries already there from the same encoder are kept)");
  build_->add_option("pipeline", pipeline_, "Pipeline JSON file")->required();
  build_->add_option("--set", overrides_, "Override a value (path.to.key=VALUE)");
}

bool TextCacheCommand::selected() const { return text_cache_->parsed(); }

int TextCacheCommand::run() {
  dist::World& world = dist::World::get();
  if (world.rank() != 0) {
    std::cerr << "text-cache: " << world.describe() << " waits for rank 0 to write the cache\n";
    world.barrier("barrier: waiting for rank 0 to write the text cache");
    return 0;
  }
  const int status = build();
  world.barrier("barrier: rank 0 wrote the text cache");
  return status;
}

int TextCacheCommand::build() {
  const ValidatedPipeline pipeline = load_pipeline(pipeline_, {overrides_});
  std::vector<std::pair<const ValidatedNode*, const stages::TextCacheUser*>> text_nodes;
  for (const ValidatedNode& node : pipeline.nodes()) {
    if (auto* user = dynamic_cast<const stages::TextCacheUser*>(node.stage.get())) {
      text_nodes.emplace_back(&node, user);
    }
  }
  if (text_nodes.empty()) {
    throw Error(pipeline_ + ": no TextEmbed node, so no text cache to build");
  }
  const std::vector<std::string> prompts = pipeline_prompts(pipeline);
  for (const auto& [node, user] : text_nodes) {
    const models::TextCacheParams& params = user->text_cache();
    std::cerr << "text-cache: " << node->label() << ": " << prompts.size() << " prompts -> "
              << params.cache << " (" << params.encoder << " encoder, text_dim " << params.text_dim
              << ")\n";
    const models::TextCacheBuildResult result = models::build_text_cache(
        params, prompts, [](const std::string& line) { std::cerr << "  " << line << "\n"; });
    std::cout << "wrote " << params.cache << ": " << result.prompts << " prompts, "
              << result.encoded << " encoded, " << result.kept << " entries kept\n";
  }
  return 0;
}

WAM_REGISTER_COMMAND(TextCacheCommand);

}  // namespace wam::cli
