// LatentCacheLookup: the cache profile's encode step. Per sample, reads the VAE latents and the
// VLM context rows that `wam-pipeline cache generate` stored for its sample id, from the HDF5
// latent store (docs/CACHE_FORMAT.md), so no video is decoded and no encoder runs for them.
//
// At open the selected artifacts are validated against the contract computed from this node's
// params (the same sampler, augment and encoder params the cache was generated with): a changed
// Augment param, dataset file or encoder weight is refused naming the part and both values. VAE
// fields need every sample; vlm.current may be partial (built with --max-samples): its misses are
// encoded online by VlmEncode, on the miss rows only, and a warning gives the coverage.
//
// Rows are read with pread from as many threads as the node runs (reads scale with threads; the
// HDF5 library, with its one global lock, is only used at open). VLM rows are stored cropped to
// their valid tokens and come out zero-padded (mask false) to the longest row of the cache, so
// that every sample has one shape and Collate stacks them.
//
// Reads:  sample_id (Int)
// Writes: video_latents [48, 3, 24, 16], memory_video_anchor_latents and
//         memory_video_recent_latents [48, 1, 24, 16] (VAE fields selected; the cache's dtype);
//         with vlm: vlm_cache_hit (Bool), vlm_cached_context [L, width] and vlm_cached_mask
//         (bool [L]) (zeros on a miss), vlm_images_needed (Bool: the cache misses samples, so
//         the current frames are decoded for VlmEncode: the reference's VLM_CURRENT projection;
//         with full coverage no frame is decoded at all, LATENT_ONLY)
// Counters: hits, misses (vlm rows), bytes_read, read_us
// Example: {"id": "cache", "type": "LatentCacheLookup", "inputs": ["sampler"],
//           "params": {"root": "${WAM_LATENT_CACHE}", "fields": ["all"],
//                      "sampler": {"$ref": "data/sampler"}, "augment": {"$ref": "data/augment"},
//                      "vlm": {"width": {"$ref": "model/vlm_dim"}}}}
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cache/cache_spec.h"
#include "formats/latent_store/latent_store.h"
#include "models/frozen_encoder.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

struct LatentCacheLookupParams {
  std::string root;
  std::vector<std::string> fields = {"all"};
  std::string validation = "meta-only";
  EpisodeSamplerParams sampler;
  AugmentParams augment;
  VaeEncodeParams vae;
  VlmEncodeParams vlm;

  template <class V>
  void visit(V& v) {
    v("root", root, "Cache root holding catalog.json (usually ${WAM_LATENT_CACHE}).", NonEmpty{});
    v("fields", fields,
      "Cached fields read here: current, memory_anchor, memory_recent, vlm, or all.");
    v("validation", validation,
      "Checks at open: meta-only (catalog, manifests, contracts, index, key coverage, shard "
      "sizes) or full (also every shard's checksum and contents).",
      OneOf{"meta-only", "full"});
    v("sampler", sampler, "The EpisodeSampler params the cache was generated from.");
    v("augment", augment, "The Augment params the cache was generated from (deterministic).");
    v("vae", vae, "The VaeEncode params of the encoder that produced the latents.");
    v("vlm", vlm, "The VlmEncode params of the model that produced the context rows.");
  }

  // The nested params have been checked by their own check() rules; these are the cache's.
  void check(ParamChecker& c) const {
    try {
      cache::parse_field_selection(fields);
    } catch (const Error& e) {
      c.error("fields", e.what());
    }
    if (const std::string random = first_random_augment_param(augment); !random.empty()) {
      c.error("augment/" + random, cache::random_augment_message(random));
    }
  }
};

// What one cached field writes into a sample.
struct FieldReader {
  std::string output;  // sample field name
  std::unique_ptr<cache::ArtifactReader> reader;
  at::ScalarType dtype = at::kFloat;
  std::vector<int64_t> shape;  // per sample; ragged: [max_length, rest...]
};

at::ScalarType scalar_type(cache::DType dtype) {
  switch (dtype) {
    case cache::DType::kFloat32: return at::kFloat;
    case cache::DType::kBFloat16: return at::kBFloat16;
    case cache::DType::kFloat16: return at::kHalf;
    case cache::DType::kBool: return at::kBool;
  }
  return at::kFloat;
}

class LatentCacheLookupStage final : public Stage,
                                     public cache::LatentCacheReader,
                                     public CanvasRenderer {
 public:
  static constexpr std::string_view kType = "LatentCacheLookup";
  static constexpr std::string_view kSummary =
      "Reads cached VAE latents and VLM context rows by sample id from the HDF5 latent store.";
  using Params = LatentCacheLookupParams;

  explicit LatentCacheLookupStage(Params params) : params_(std::move(params)) {}

  const std::string& cache_root() const override { return params_.root; }
  const AugmentParams* canvas_params() const override { return &params_.augment; }
  std::string canvas_params_pointer() const override { return "/augment"; }
  std::vector<std::string> cache_fields() const override {
    return cache::parse_field_selection(params_.fields);
  }
  cache::CacheSpec cache_spec(const Settings& settings) const override {
    return make_spec(params_, settings);
  }

  void declare(Contract& contract) const override {
    contract.reads("sample_id", FieldType::kInt);
    for (const std::string& field : selected()) {
      if (field == "vlm") {
        contract.writes("vlm_cache_hit", FieldType::kBool);
        contract.writes("vlm_cached_context", FieldType::kTensor);
        contract.writes("vlm_cached_mask", FieldType::kTensor);
        contract.writes("vlm_images_needed", FieldType::kBool);
      } else {
        contract.writes(latent_field(field), FieldType::kTensor);
      }
    }
    contract.concurrency(Concurrency::unlimited());
  }

  void open(Context& context) override {
    const std::vector<std::string> fields = cache_fields();
    const cache::CacheSpec spec = cache_spec(context.settings());
    const cache::DatasetFingerprint dataset = cache::fingerprint_dataset(spec.sampler.dataset_dirs);
    cache::OpenOptions options;
    options.mode = params_.validation == "full" ? cache::ValidationMode::kFull
                                                : cache::ValidationMode::kMetaOnly;
    for (const std::string& field : fields) {
      const nlohmann::json expected =
          cache::artifact_contract(field, spec, dataset, dataset.sample_count);
      options.partial_allowed = field == "vlm";
      FieldReader reader;
      reader.reader = cache::open_artifact(params_.root, expected, options);
      const cache::ValueSchema& first = reader.reader->values()[0];
      reader.dtype = scalar_type(first.dtype);
      if (field == "vlm") {
        vlm_ = std::move(reader);
        open_vlm(context);
      } else {
        reader.output = latent_field(field);
        reader.shape = first.shape;
        latents_.push_back(std::move(reader));
      }
      context.log("LatentCacheLookup: " + expected.at("artifact_id").get<std::string>() +
                  " build " + (field == "vlm" ? vlm_ : latents_.back()).reader->build_id());
    }
    bytes_read_ = &context.counter("bytes_read");
    read_us_ = &context.counter("read_us");
    hits_ = &context.counter("hits");
    misses_ = &context.counter("misses");
  }

  void process(Sample sample, Emitter& out) override {
    const auto start = std::chrono::steady_clock::now();
    const int64_t sample_id = sample.get_int("sample_id");
    int64_t bytes = 0;
    for (const FieldReader& field : latents_) {
      at::Tensor latent = at::empty(field.shape, at::TensorOptions().dtype(field.dtype));
      field.reader->read_fixed(sample_id, 0, latent.data_ptr());
      bytes += static_cast<int64_t>(latent.nbytes());
      sample.set_tensor(field.output, std::move(latent));
    }
    if (vlm_.reader) {
      const bool hit = vlm_.reader->contains(sample_id);
      sample.set("vlm_cache_hit", hit);
      sample.set("vlm_images_needed", vlm_partial_);
      if (hit) {
        bytes += read_vlm_row(sample_id, sample);
        hits_->add();
      } else {
        sample.set_tensor("vlm_cached_context",
                          at::zeros(vlm_.shape, at::TensorOptions().dtype(vlm_.dtype)));
        sample.set_tensor("vlm_cached_mask",
                          at::zeros({vlm_.shape[0]}, at::TensorOptions().dtype(at::kBool)));
        misses_->add();
      }
    }
    bytes_read_->add(bytes);
    read_us_->add(std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count());
    out.emit(std::move(sample));
  }

 private:
  static std::string latent_field(const std::string& field) {
    if (field == "current") return "video_latents";
    return "memory_video_" + field.substr(std::string("memory_").size()) + "_latents";
  }

  std::vector<std::string> selected() const {
    try {
      return cache::parse_field_selection(params_.fields);
    } catch (const Error&) {
      return {};  // reported by open(); validation sees no fields written
    }
  }

  static cache::CacheSpec make_spec(const Params& params, const Settings& settings) {
    cache::CacheSpec spec;
    spec.sampler = params.sampler;
    spec.augment = params.augment;
    spec.vae = params.vae;
    spec.vlm = params.vlm;
    spec.vae_dtype = resolved_dtype(spec.vae, settings);
    spec.vlm_dtype = resolved_dtype(spec.vlm, settings);
    return spec;
  }

  static std::string resolved_dtype(const PlacedEncoderParams& encoder, const Settings& settings) {
    const models::EncoderPlacement placement =
        models::resolve_placement(encoder.device, encoder.dtype, settings, "LatentCacheLookup");
    return placement.dtype == at::kBFloat16 ? "bfloat16" : "float32";
  }

  void open_vlm(Context& context) {
    const cache::ArtifactReader& reader = *vlm_.reader;
    const int context_index = reader.value_index("context");
    int64_t longest = 1;
    for (int64_t id = 0; id < reader.expected_samples(); ++id) {
      if (reader.contains(id)) longest = std::max(longest, reader.ragged_length(id, context_index));
    }
    const cache::ValueSchema& schema = reader.values()[context_index];
    vlm_.dtype = scalar_type(schema.dtype);
    vlm_.shape = {longest, schema.shape[1]};
    vlm_partial_ = reader.cached_samples() < reader.expected_samples();
    if (vlm_partial_) {
      char coverage[32];
      std::snprintf(coverage, sizeof(coverage), "%.1f", 100.0 * reader.coverage());
      context.log("warning: Cache artifact partially covered; online fallback enabled: " +
                  reader.artifact_id() + " samples=" + std::to_string(reader.cached_samples()) +
                  "/" + std::to_string(reader.expected_samples()) + " coverage=" + coverage +
                  "% (the misses are encoded by VlmEncode)");
    }
  }

  // The cached row, zero-padded (mask false) to the cache's longest row.
  int64_t read_vlm_row(int64_t sample_id, Sample& sample) const {
    const cache::ArtifactReader& reader = *vlm_.reader;
    const int context_index = reader.value_index("context");
    const int mask_index = reader.value_index("mask");
    const int64_t length = reader.ragged_length(sample_id, context_index);
    at::Tensor context = at::zeros(vlm_.shape, at::TensorOptions().dtype(vlm_.dtype));
    at::Tensor mask = at::zeros({vlm_.shape[0]}, at::TensorOptions().dtype(at::kBool));
    reader.read_ragged(sample_id, context_index, context.data_ptr());
    reader.read_ragged(sample_id, mask_index, mask.data_ptr());
    const int64_t bytes = length * (context.size(1) * context.element_size() + 1);
    sample.set_tensor("vlm_cached_context", std::move(context));
    sample.set_tensor("vlm_cached_mask", std::move(mask));
    return bytes;
  }

  Params params_;
  std::vector<FieldReader> latents_;
  FieldReader vlm_;
  bool vlm_partial_ = false;
  Counter* bytes_read_ = nullptr;
  Counter* read_us_ = nullptr;
  Counter* hits_ = nullptr;
  Counter* misses_ = nullptr;
};

WAM_REGISTER_STAGE(LatentCacheLookupStage);

}  // namespace
}  // namespace wam::stages
