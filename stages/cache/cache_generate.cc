// generate's graph is made from the lookup node's params; shards are contiguous sample id
// ranges named by their first sample id, closed after shard_size samples or shard_seconds of work,
// and the staging build is named by its contract, so a rerun after an interruption resumes after
// the last shard that was written and checksummed.
//
// Under a launcher (common/distributed.h) the ranks share the staging build, which must lie on a
// file system every rank sees: rank 0 creates it, each rank encodes a contiguous block of
// shard_size shards (a sample id range; a block boundary may cut an episode) and writes them,
// then rank 0 merges, validates and publishes; the shards are the ones a single process writes
// unless some close on time. After each phase the ranks agree on success with an all-reduce: a
// rank that failed leaves its message in the rendezvous store and every rank fails naming it; a
// rank that died or hangs fails the others' all-reduce (at the latest after WAM_DIST_TIMEOUT_S).
// Nothing is published unless every rank wrote its block.
#include "cache/cache_generate.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

#include "cache/cache_spec.h"
#include "common/distributed.h"
#include "wam/config.h"
#include "wam/pipeline.h"
#include "wam/registry.h"
#include "wam/runner.h"
#include "wam/tensor.h"

namespace wam::cache {
namespace {

using Clock = std::chrono::steady_clock;

// Decoded frames kept per decoding thread (the reference's frame_cache_capacity).
constexpr int64_t kFrameCacheFrames = 96;

// The pipeline's LatentCacheLookup node (the one node reading the cache).
struct CacheNode {
  const ValidatedNode* node = nullptr;
  const LatentCacheReader* reader = nullptr;
};

CacheNode find_cache_node(const ValidatedPipeline& pipeline) {
  CacheNode found;
  for (const ValidatedNode& node : pipeline.nodes()) {
    if (auto* reader = dynamic_cast<const LatentCacheReader*>(node.stage.get())) {
      if (found.node) {
        throw Error(pipeline.file() + ": more than one node reads the latent cache (" +
                    found.node->id + ", " + node.id + "); give the cache command one");
      }
      found = {&node, reader};
    }
  }
  if (!found.node) {
    throw Error(pipeline.file() +
                ": no node reads the latent cache (LatentCacheLookup); cache commands take a "
                "cache pipeline such as pipelines/robotwin_cache.json");
  }
  return found;
}

// The generation graph: only what the selected fields need, in sample id order.
PipelineConfig generation_graph(const ValidatedPipeline& pipeline, const CacheSpec& spec, bool vae,
                                bool vlm, int64_t sample_count, int64_t batch_size) {
  PipelineConfig config;
  config.file = pipeline.file() + " (cache generate)";
  config.name = pipeline.name() + "_cache_generate";
  const Settings& settings = pipeline.settings();
  config.settings = {
      {"seed", settings.seed},
      {"batch_size", batch_size},
      {"max_in_flight", settings.max_in_flight > 0
                            ? std::max<int64_t>(settings.max_in_flight, 2 * batch_size)
                            : 0},  // auto
      {"ordered", true},
      {"epochs", 1},
      {"threads", settings.threads},
      {"host_memory_gib", settings.host_memory_gib},
      {"device", settings.device}};
  auto node = [&](std::string id, std::string type, std::vector<std::string> inputs,
                  nlohmann::json params) {
    NodeConfig n;
    n.id = std::move(id);
    n.type = std::move(type);
    n.inputs = std::move(inputs);
    n.params = std::move(params);
    n.pointer = "/nodes/" + std::to_string(config.nodes.size());
    config.nodes.push_back(std::move(n));
  };
  nlohmann::json sampler = params_to_json(spec.sampler);
  sampler["shuffle"] = false;
  sampler["max_samples"] = sample_count;
  sampler["rank"] = 0;
  sampler["world_size"] = 1;
  const std::string frames = vae ? "all" : "current";
  nlohmann::json augment = params_to_json(spec.augment);
  augment["frames"] = frames;
  augment["planes_from_decode"] = false;  // the decode below writes full-size frames
  node("sampler", "EpisodeSampler", {}, sampler);
  // Samples come in id order: consecutive ones share most frames, kept in a frame cache.
  node("decode", "VideoDecode", {"sampler"},
       {{"mode", "sparse"}, {"frames", frames}, {"frame_cache", kFrameCacheFrames}});
  node("augment", "Augment", {"decode"}, augment);
  node("collate", "Collate", {"augment"}, {{"drop_last", false}});
  node("h2d", "HostToDevice", {"collate"},
       {{"mode", "pageable"}, {"video_as_uint8", augment.value("video_dtype", "") == "uint8"}});
  std::string last = "h2d";
  if (vae) {
    node("vae", "VaeEncode", {last}, params_to_json(spec.vae));
    last = "vae";
  }
  if (vlm) {
    nlohmann::json params = params_to_json(spec.vlm);
    params["merge_cached"] = false;
    node("vlm", "VlmEncode", {last}, params);
  }
  return config;
}

// Runs `fn` on this rank, then agrees with every rank that each one succeeded: a failure anywhere
// fails every rank, naming the rank that failed and why.
template <class Fn>
void on_every_rank(dist::World& world, const std::string& phase, Fn&& fn) {
  std::exception_ptr error;
  try {
    fn();
  } catch (const std::exception& e) {
    if (!world.distributed()) throw;
    error = std::current_exception();
    world.store_set("cache_generate/" + phase + "/error/" + std::to_string(world.rank()), e.what());
  }
  if (!world.distributed()) return;
  world.store_set("cache_generate/" + phase + "/done/" + std::to_string(world.rank()), "1");
  at::Tensor failed = at::zeros({world.size()}, at::kInt);
  failed[world.rank()] = error ? 1 : 0;
  try {
    world.all_reduce_sum({failed}, "all_reduce of the ranks' status after " + phase);
  } catch (const Error& e) {
    if (error) std::rethrow_exception(error);
    std::string missing;
    for (int r = 0; r < world.size(); ++r) {
      if (!world.store_get_now("cache_generate/" + phase + "/done/" + std::to_string(r))) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    throw Error("cache generate: " + phase + " did not finish on every rank" +
                (missing.empty() ? std::string()
                                 : " (rank " + missing +
                                       " never reported: it exited, hangs or is still busy)") +
                "; nothing was published. " + e.what());
  }
  if (error) std::rethrow_exception(error);
  const int* flags = failed.data_ptr<int>();
  for (int r = 0; r < world.size(); ++r) {
    if (flags[r] == 0) continue;
    const std::optional<std::string> message =
        world.store_get_now("cache_generate/" + phase + "/error/" + std::to_string(r));
    throw Error("cache generate: rank " + std::to_string(r) + " failed during " + phase + ": " +
                message.value_or("(no message)") + "; nothing was published");
  }
}

// Rows of one artifact waiting for their shard to fill.
struct PendingRows {
  std::vector<at::Tensor> rows;           // fixed values: one tensor per sample
  std::vector<at::Tensor> context, mask;  // vlm: cropped rows
};

// A VLM row cropped to its valid tokens [first, last]; a row without any keeps one zero token.
// Copies: a view would keep its whole batch's storage alive while the shard fills.
std::pair<at::Tensor, at::Tensor> crop_vlm_row(const at::Tensor& context, const at::Tensor& mask) {
  const at::Tensor valid = at::nonzero(mask).flatten();
  if (valid.numel() == 0) {
    return {at::zeros({1, context.size(1)}, context.options()), at::zeros({1}, mask.options())};
  }
  const int64_t first = valid.min().item<int64_t>(), last = valid.max().item<int64_t>();
  return {context.narrow(0, first, last - first + 1).clone(),
          mask.narrow(0, first, last - first + 1).clone()};
}

void check_latent(const at::Tensor& latent, const ValueSchema& schema,
                  const std::string& artifact_id) {
  const std::string dtype = latent.scalar_type() == at::kBFloat16 ? "bfloat16"
                            : latent.scalar_type() == at::kFloat  ? "float32"
                                                                  : describe_tensor(latent);
  if (dtype != dtype_name(schema.dtype) || latent.sizes() != at::IntArrayRef(schema.shape)) {
    std::string expected;
    for (int64_t d : schema.shape) expected += (expected.empty() ? "" : ", ") + std::to_string(d);
    throw Error(artifact_id + ": the encoder produced " + describe_tensor(latent) +
                " per sample but the contract expects " + std::string(dtype_name(schema.dtype)) +
                " [" + expected + "]");
  }
}

// The encoded rows, arriving in sample id order, cut into shards of at most `shard_size` samples
// or `shard_seconds` of work, whichever comes first (docs/RELIABILITY.md, "Signals"), each written
// by every builder. A shard is named by its first sample id, so a rerun finds it whatever its size
// and whichever rank wrote it. The rows waiting for their shard come from the run's host memory
// budget: with the first batch, priced then, the writer claims as many rows as the budget holds
// (docs/RELIABILITY.md, "Host memory"), and closes a shard there, before shard_size.
class ShardWriter {
 public:
  ShardWriter(const std::vector<std::unique_ptr<ArtifactBuilder>>& builders,
              const std::vector<std::string>& fields, const GenerateOptions& options,
              int64_t first_sample, int64_t end_sample)
      : builders_(builders),
        fields_(fields),
        shard_size_(options.shard_size),
        shard_seconds_(options.shard_seconds),
        end_sample_(end_sample),
        pending_(builders.size()),
        done_(first_sample),
        written_end_(first_sample),
        shard_began_(Clock::now()),
        shard_rows_(options.shard_size) {}

  // The run's budget, which the rows are claimed from with the first batch.
  void use_budget(HostMemoryBudget& budget) { budget_ = &budget; }

  // The samples of one encoder batch; writes every shard they fill or whose time is up.
  void add_batch(const Sample& batch) {
    static const std::map<std::string, std::string> kLatentOf = {
        {"current", "video_latents"},
        {"memory_anchor", "memory_video_anchor_latents"},
        {"memory_recent", "memory_video_recent_latents"}};
    const at::Tensor ids = batch.tensor("sample_id").to(at::kCPU);
    std::vector<at::Tensor> outputs(builders_.size()), masks(builders_.size());
    for (size_t b = 0; b < builders_.size(); ++b) {
      if (fields_[b] == "vlm") {
        outputs[b] = batch.tensor("vlm_context").to(at::kCPU);
        masks[b] = batch.tensor("vlm_mask").to(at::kCPU);
      } else {
        outputs[b] = batch.tensor(kLatentOf.at(fields_[b])).to(at::kCPU);
      }
    }
    if (!claimed_ && ids.size(0) > 0) {
      claimed_ = true;
      shard_rows_ = shard_rows_within(budget_, shard_size_, row_bytes(outputs, masks));
    }
    for (int64_t r = 0; r < ids.size(0); ++r) {
      add_row(ids[r].item<int64_t>(), outputs, masks, r);
      if (static_cast<int64_t>(pending_ids_.size()) == shard_rows_ || done_ == end_sample_) {
        flush();
      }
    }
    // The rows of a batch arrive together: the time is checked once they are in.
    if (!pending_ids_.empty() &&
        std::chrono::duration<double>(Clock::now() - shard_began_).count() >= shard_seconds_) {
      flush();
    }
  }

  int64_t done() const { return done_; }                // the next sample id expected
  int64_t written_end() const { return written_end_; }  // the end of the last shard written

 private:
  // Bytes one sample's rows hold, every artifact's together: a VLM row at its full padded length,
  // the most its crop keeps.
  static int64_t row_bytes(const std::vector<at::Tensor>& outputs,
                           const std::vector<at::Tensor>& masks) {
    int64_t bytes = 0;
    for (size_t b = 0; b < outputs.size(); ++b) {
      bytes += static_cast<int64_t>(outputs[b].nbytes()) / outputs[b].size(0);
      if (masks[b].defined()) bytes += static_cast<int64_t>(masks[b].nbytes()) / masks[b].size(0);
    }
    return bytes;
  }

  void add_row(int64_t id, const std::vector<at::Tensor>& outputs,
               const std::vector<at::Tensor>& masks, int64_t r) {
    if (id != done_) {
      throw Error("cache generate: sample " + std::to_string(id) + " arrived where sample " +
                  std::to_string(done_) +
                  " was expected; the generation graph must keep sample id order");
    }
    pending_ids_.push_back(id);
    for (size_t b = 0; b < builders_.size(); ++b) {
      if (fields_[b] == "vlm") {
        auto [context, mask] = crop_vlm_row(outputs[b][r], masks[b][r]);
        pending_[b].context.push_back(std::move(context));
        pending_[b].mask.push_back(std::move(mask));
      } else {
        // A copy: a view would keep its whole batch's storage alive while the shard fills.
        at::Tensor latent = outputs[b][r].clone(at::MemoryFormat::Contiguous);
        check_latent(latent, builders_[b]->values()[0], builders_[b]->artifact_id());
        pending_[b].rows.push_back(std::move(latent));
      }
    }
    ++done_;
  }

  void flush() {
    for (size_t b = 0; b < builders_.size(); ++b) {
      PendingRows& rows = pending_[b];
      std::vector<ValueRows> values;
      at::Tensor block, context, mask;
      if (fields_[b] == "vlm") {
        context = at::cat(rows.context).contiguous();
        mask = at::cat(rows.mask).contiguous();
        ValueRows context_rows{"context", context.data_ptr(), context.nbytes(), {}};
        for (const at::Tensor& row : rows.context) context_rows.lengths.push_back(row.size(0));
        ValueRows mask_rows{"mask", mask.data_ptr(), mask.nbytes(), context_rows.lengths};
        values = {context_rows, mask_rows};
      } else {
        block = at::stack(rows.rows).contiguous();
        values = {{"latent", block.data_ptr(), block.nbytes(), {}}};
      }
      builders_[b]->write_shard(pending_ids_.front(), pending_ids_, values);
      rows = PendingRows{};
    }
    dist::test_exit_point("cache_shard");
    pending_ids_.clear();
    written_end_ = done_;
    shard_began_ = Clock::now();
  }

  const std::vector<std::unique_ptr<ArtifactBuilder>>& builders_;
  const std::vector<std::string>& fields_;
  const int64_t shard_size_;
  const double shard_seconds_;
  const int64_t end_sample_;
  std::vector<PendingRows> pending_;
  std::vector<int64_t> pending_ids_;
  int64_t done_, written_end_;
  Clock::time_point shard_began_;
  HostMemoryBudget* budget_ = nullptr;
  bool claimed_ = false;
  int64_t shard_rows_;  // shard_size_, or what the budget holds
};

// The end of a staged shard's samples when they are [first, end) in order, else -1.
int64_t contiguous_end(const std::optional<std::vector<int64_t>>& ids, int64_t first) {
  if (!ids || ids->empty()) return -1;
  for (size_t i = 0; i < ids->size(); ++i) {
    if ((*ids)[i] != first + static_cast<int64_t>(i)) return -1;
  }
  return first + static_cast<int64_t>(ids->size());
}

// One `cache generate`: prepare (load, check, stage), resume, encode, publish. Under a launcher
// each phase ends with the ranks agreeing that every one of them succeeded.
class Generation {
 public:
  explicit Generation(const GenerateOptions& options)
      : options_(options), world_(dist::World::get()) {
    result_.rank = world_.rank();
    result_.world_size = world_.size();
  }

  GenerateResult run() {
    const Clock::time_point start = Clock::now();
    if (!world_.distributed()) {
      prepare();
      resume();
      encode();
      publish();
    } else {
      on_every_rank(world_, "the preparation", [&] { prepare(); });
      on_every_rank(world_, "opening the staging build", [&] {
        if (world_.rank() != 0) make_builders();
        resume();
      });
      on_every_rank(world_, "encoding", [&] { encode(); });
      on_every_rank(world_, "publishing", [&] { publish(); });
    }
    result_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return result_;
  }

 private:
  // Every rank checks the request; rank 0 then creates (or resumes) the staging build, which the
  // other ranks open once it exists.
  void prepare() {
    pipeline_.emplace(load_pipeline(options_.pipeline, {options_.overrides}));
    const CacheNode cache_node = find_cache_node(*pipeline_);
    fields_ = parse_field_selection(options_.fields.empty() ? cache_node.reader->cache_fields()
                                                            : options_.fields);
    spec_ = cache_node.reader->cache_spec(pipeline_->settings());
    result_.root = cache_node.reader->cache_root();
    if (world_.rank() == 0) build_lock_.emplace(result_.root);
    std::vector<std::string> artifact_ids;
    for (const auto& field : fields_) artifact_ids.push_back(field_info(field).artifact_id);
    check_write_target(result_.root, artifact_ids, options_.overwrite);
    dataset_ = fingerprint_dataset(spec_.sampler.dataset_dirs);
    result_.samples = options_.max_samples > 0
                          ? std::min(options_.max_samples, dataset_.sample_count)
                          : dataset_.sample_count;
    if (world_.rank() == 0) make_builders();
  }

  void make_builders() {
    for (const auto& field : fields_) {
      const nlohmann::json contract = artifact_contract(field, spec_, dataset_, result_.samples);
      builders_.push_back(std::make_unique<ArtifactBuilder>(
          result_.root, contract, build_id_of(contract, options_.shard_size)));
      builder_fields_.push_back(field);
      (field_info(field).vae ? vae_ : vlm_) = true;
    }
  }

  // Each rank takes a contiguous block of shard_size shards and resumes after the shards that
  // every artifact holds one after the other from the block's start; what lies past them (a shard
  // only some artifacts wrote, or one of an earlier layout) is discarded.
  void resume() {
    const int64_t shard_size = options_.shard_size;
    const int64_t shard_count = (result_.samples + shard_size - 1) / shard_size;
    result_.shard_begin = shard_count * world_.rank() / world_.size();
    result_.shard_end = shard_count * (world_.rank() + 1) / world_.size();
    block_first_ = std::min(result_.shard_begin * shard_size, result_.samples);
    end_sample_ = std::min(result_.shard_end * shard_size, result_.samples);
    first_sample_ = block_first_;
    while (first_sample_ < end_sample_ && !builders_.empty()) {
      int64_t end = contiguous_end(builders_[0]->complete_shard(first_sample_), first_sample_);
      for (size_t b = 1; b < builders_.size() && end >= 0; ++b) {
        if (contiguous_end(builders_[b]->complete_shard(first_sample_), first_sample_) != end) {
          end = -1;
        }
      }
      if (end < 0 || end > end_sample_) break;
      first_sample_ = end;
      ++result_.shards_resumed;
    }
    for (const auto& builder : builders_) builder->discard_shards(first_sample_, end_sample_);
    if (result_.shards_resumed > 0 && options_.on_resume) {
      options_.on_resume(first_sample_, result_.shards_resumed);
    }
  }

  void encode() {
    if (first_sample_ >= end_sample_) return;
    const int64_t batch_size =
        options_.batch_size > 0 ? options_.batch_size : pipeline_->settings().batch_size;
    const PipelineConfig config =
        generation_graph(*pipeline_, spec_, vae_, vlm_, end_sample_, batch_size);
    ValidatedPipeline graph = ValidatedPipeline::from_config(config, StageRegistry::builtin());
    graph.find("sampler")->source().restore({{"epoch", 0}, {"position", first_sample_}});
    ShardWriter writer(builders_, builder_fields_, options_, first_sample_, end_sample_);
    RunOptions run_options;
    run_options.on_host_memory = [&](HostMemoryBudget& budget) { writer.use_budget(budget); };
    run_options.on_output = [&](const Sample& batch) {
      writer.add_batch(batch);
      if (options_.on_progress) {
        options_.on_progress(writer.done() - block_first_, end_sample_ - block_first_);
      }
    };
    run_options.interrupt = options_.interrupt;
    RunResult run = run_pipeline(graph, run_options);
    if (run.error) throw *run.error;
    if (run.stats.stop_reason == "interrupted" && writer.done() != end_sample_) {
      // The shard being filled is dropped: shards are the unit of resume.
      result_.interrupted = true;
      result_.samples_kept = writer.written_end() - block_first_;
      result_.samples_encoded = writer.written_end() - first_sample_;
      if (world_.distributed()) {
        throw Error("cache generate: interrupted on rank " + std::to_string(world_.rank()) +
                    " after " + std::to_string(result_.samples_kept) +
                    " samples of its block; the shards written stay staged for a rerun");
      }
      return;
    }
    if (writer.done() != end_sample_) {
      throw Error("cache generate: the data path produced samples up to " +
                  std::to_string(writer.done()) + " of [" + std::to_string(first_sample_) + ", " +
                  std::to_string(end_sample_) + ")");
    }
    result_.samples_encoded = end_sample_ - first_sample_;
  }

  void publish() {
    if (world_.rank() != 0 || result_.interrupted) return;
    for (auto& builder : builders_) {
      result_.published.push_back(builder->publish(options_.overwrite));
    }
  }

  const GenerateOptions& options_;
  dist::World& world_;
  GenerateResult result_;
  std::optional<ValidatedPipeline> pipeline_;
  std::vector<std::string> fields_;
  CacheSpec spec_;
  DatasetFingerprint dataset_;
  bool vae_ = false, vlm_ = false;
  std::optional<BuildLock> build_lock_;  // rank 0's, for the whole run
  std::vector<std::unique_ptr<ArtifactBuilder>> builders_;
  std::vector<std::string> builder_fields_;
  int64_t block_first_ = 0, first_sample_ = 0, end_sample_ = 0;  // this rank's sample ids
};

}  // namespace

GenerateResult generate_cache(const GenerateOptions& options) { return Generation(options).run(); }

std::vector<ArtifactReport> validate_pipeline_cache(const std::string& pipeline_file,
                                                    const std::vector<std::string>& overrides,
                                                    ValidationMode mode, std::string* root) {
  const ValidatedPipeline pipeline = load_pipeline(pipeline_file, {overrides});
  const CacheNode cache_node = find_cache_node(pipeline);
  const CacheSpec spec = cache_node.reader->cache_spec(pipeline.settings());
  const DatasetFingerprint dataset = fingerprint_dataset(spec.sampler.dataset_dirs);
  if (root) *root = cache_node.reader->cache_root();
  OpenOptions options;
  options.mode = mode;
  std::vector<ArtifactReport> reports;
  for (const std::string& field : cache_node.reader->cache_fields()) {
    options.partial_allowed = field == "vlm";
    const auto reader =
        open_artifact(cache_node.reader->cache_root(),
                      artifact_contract(field, spec, dataset, dataset.sample_count), options);
    reports.push_back({reader->artifact_id(), reader->build_id(), reader->cached_samples(),
                       reader->expected_samples()});
  }
  return reports;
}

}  // namespace wam::cache
