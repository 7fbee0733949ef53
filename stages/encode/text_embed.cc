// TextEmbed: the T5-style text context of each row's prompt, read from the HDF5 text cache keyed
// by SHA-256 of the prompt (see models/text_encoder.h for the file layout). The cache is filled
// beforehand by `wam-pipeline text-cache build PIPELINE`; a prompt without an entry is an error
// that says so. Padded token rows are zero and the mask is all true, as the reference feeds its
// umT5 context to the video expert.
// Reads:  prompt (Json array of B strings)
// Writes: context (float32 [B, 128, text_dim]), context_mask (bool [B, 128], all true)
// Example: {"id": "text", "type": "TextEmbed", "inputs": ["vlm"],
//           "params": {"cache": {"$ref": "data/text_cache"}, "text_dim": 4096}}
// The embeddings kept in memory (memory_entries, 2 MiB each at text_dim 4096) are claimed from the
// run's host memory budget with the first batch: fewer are kept when it cannot hold them all
// (docs/RELIABILITY.md, "Host memory").
#include <memory>
#include <string>

#include "common/lru_cache.h"
#include "encode/text_cache_user.h"
#include "models/text_encoder.h"
#include "wam/host_memory.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

class TextEmbedStage final : public Stage, public TextCacheUser {
 public:
  static constexpr std::string_view kType = "TextEmbed";
  static constexpr std::string_view kSummary =
      "T5-style text context per prompt from the HDF5 text cache (wam-pipeline text-cache build).";
  using Params = models::TextCacheParams;

  explicit TextEmbedStage(Params params)
      : params_(std::move(params)), memory_(static_cast<size_t>(params_.memory_entries)) {}

  const models::TextCacheParams& text_cache() const override { return params_; }

  void declare(Contract& contract) const override {
    contract.reads("prompt", FieldType::kJson);
    contract.writes("context", FieldType::kTensor);
    contract.writes("context_mask", FieldType::kTensor);
    contract.concurrency(Concurrency::serial());
  }

  void open(Context& context) override {
    reader_ = std::make_unique<models::TextCacheReader>(params_);
    cache_reads_ = &context.counter("text_cache_reads");
    budget_ = context.host_memory();
  }

  void process(Sample batch, Emitter& out) override {
    const nlohmann::json& prompts = batch.get_json("prompt");
    if (!prompts.is_array()) {
      throw Error("field \"prompt\" must be a Json array of strings (a batch), got " +
                  prompts.dump());
    }
    if (budget_) {
      // One entry: float32 [128, text_dim].
      const int64_t entries = budget_->claim(
          "text embeddings", 4 * models::kTextTokens * params_.text_dim, params_.memory_entries, 1);
      memory_ = LruCache<std::string, at::Tensor>(static_cast<size_t>(entries));
      budget_ = nullptr;  // claimed once
    }
    std::vector<at::Tensor> contexts;
    for (const auto& prompt : prompts) {
      if (!prompt.is_string())
        throw Error("field \"prompt\": expected strings, got " + prompt.dump());
      contexts.push_back(context_for(prompt.get<std::string>()));
    }
    const auto rows = static_cast<int64_t>(contexts.size());
    batch.set_tensor("context", torch::stack(contexts));
    batch.set_tensor("context_mask", torch::ones({rows, models::kTextTokens}, at::kBool));
    out.emit(std::move(batch));
  }

 private:
  // The prompt's context with padded rows zeroed (an entry written by another tool may not be).
  at::Tensor context_for(const std::string& prompt) {
    if (const at::Tensor* hit = memory_.find(prompt)) return *hit;
    std::optional<models::TextContext> entry = reader_->find(prompt);
    if (!entry) {
      throw Error("Missing text embedding cache for prompt \"" + prompt +
                  "\": run wam-pipeline text-cache build PIPELINE (cache file " + params_.cache +
                  ")");
    }
    cache_reads_->add();
    return memory_.insert(prompt, entry->context * entry->mask.unsqueeze(-1).to(at::kFloat));
  }

  Params params_;
  LruCache<std::string, at::Tensor> memory_;
  std::unique_ptr<models::TextCacheReader> reader_;
  Counter* cache_reads_ = nullptr;
  HostMemoryBudget* budget_ = nullptr;  // until the first batch has claimed the entries
};

WAM_REGISTER_STAGE(TextEmbedStage);

}  // namespace
}  // namespace wam::stages
