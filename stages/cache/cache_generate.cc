// generate's graph is made from the lookup node's params; shards are contiguous sample id
// ranges, and the staging build is named by its contract, so a rerun after an interruption
// resumes at the first shard that was not written and checksummed.
//
// Under a launcher (common/distributed.h) the ranks share the staging build, which must lie on a
// file system every rank sees: rank 0 creates it, each rank encodes a contiguous block of whole
// shards (a sample id range, so the shards are the ones a single process writes; a block boundary
// may cut an episode) and writes them, then rank 0 merges, validates and publishes. After each
// phase the ranks agree on success with an all-reduce: a rank that failed leaves its message in
// the rendezvous store and every rank fails naming it; a rank that died or hangs fails the others'
// all-reduce (at the latest after WAM_DIST_TIMEOUT_S). Nothing is published unless every rank
// wrote its block.
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
std::pair<at::Tensor, at::Tensor> crop_vlm_row(const at::Tensor& context, const at::Tensor& mask) {
  const at::Tensor valid = at::nonzero(mask).flatten();
  if (valid.numel() == 0) {
    return {at::zeros({1, context.size(1)}, context.options()), at::zeros({1}, mask.options())};
  }
  const int64_t first = valid.min().item<int64_t>(), last = valid.max().item<int64_t>();
  return {context.narrow(0, first, last - first + 1).contiguous(),
          mask.narrow(0, first, last - first + 1).contiguous()};
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

}  // namespace

GenerateResult generate_cache(const GenerateOptions& options) {
  const Clock::time_point start = Clock::now();
  dist::World& world = dist::World::get();
  GenerateResult result;
  result.rank = world.rank();
  result.world_size = world.size();
  std::optional<ValidatedPipeline> loaded;
  const CacheNode* cache_node = nullptr;
  CacheNode found;
  std::vector<std::string> fields;
  CacheSpec spec;
  DatasetFingerprint dataset;
  bool vae = false, vlm = false;
  std::optional<BuildLock> build_lock;  // rank 0's, for the whole run
  std::vector<std::unique_ptr<ArtifactBuilder>> builders;
  std::vector<std::string> builder_fields;
  auto make_builders = [&] {
    for (const auto& field : fields) {
      const nlohmann::json contract = artifact_contract(field, spec, dataset, result.samples);
      builders.push_back(std::make_unique<ArtifactBuilder>(
          result.root, contract, build_id_of(contract, options.shard_size)));
      builder_fields.push_back(field);
      (field_info(field).vae ? vae : vlm) = true;
    }
  };
  // Every rank checks the request; rank 0 then creates (or resumes) the staging build, which the
  // other ranks open once it exists.
  auto prepare = [&] {
    loaded.emplace(load_pipeline(options.pipeline, {options.overrides}));
    found = find_cache_node(*loaded);
    cache_node = &found;
    fields = parse_field_selection(options.fields.empty() ? cache_node->reader->cache_fields()
                                                          : options.fields);
    spec = cache_node->reader->cache_spec(loaded->settings());
    result.root = cache_node->reader->cache_root();
    if (world.rank() == 0) build_lock.emplace(result.root);
    std::vector<std::string> artifact_ids;
    for (const auto& field : fields) artifact_ids.push_back(field_info(field).artifact_id);
    check_write_target(result.root, artifact_ids, options.overwrite);
    dataset = fingerprint_dataset(spec.sampler.dataset_dirs);
    result.samples = options.max_samples > 0 ? std::min(options.max_samples, dataset.sample_count)
                                             : dataset.sample_count;
    if (world.rank() == 0) make_builders();
  };
  if (!world.distributed()) {
    prepare();
  } else {
    on_every_rank(world, "the preparation", prepare);
    on_every_rank(world, "opening the staging build", [&] {
      if (world.rank() != 0) make_builders();
    });
  }
  const ValidatedPipeline& pipeline = *loaded;

  // Shards are contiguous sample id ranges; each rank takes a contiguous block of them and
  // resumes at the first one of its block that some artifact lacks.
  const int64_t shard_size = options.shard_size;
  const int64_t shard_count = (result.samples + shard_size - 1) / shard_size;
  const int64_t block_begin = shard_count * world.rank() / world.size();
  const int64_t block_end = shard_count * (world.rank() + 1) / world.size();
  result.shard_begin = block_begin;
  result.shard_end = block_end;
  int64_t first_missing = block_begin;
  while (first_missing < block_end &&
         std::all_of(builders.begin(), builders.end(),
                     [&](const auto& b) { return b->shard_complete(first_missing); })) {
    ++first_missing;
  }
  result.shards_resumed = first_missing - block_begin;
  const int64_t first_sample = first_missing * shard_size;
  const int64_t end_sample = std::min(block_end * shard_size, result.samples);
  if (result.shards_resumed > 0 && options.on_resume) {
    options.on_resume(first_sample, result.shards_resumed);
  }

  auto encode = [&] {
    if (first_sample < end_sample) {
      const int64_t batch_size =
          options.batch_size > 0 ? options.batch_size : pipeline.settings().batch_size;
      const PipelineConfig config =
          generation_graph(pipeline, spec, vae, vlm, end_sample, batch_size);
      ValidatedPipeline graph = ValidatedPipeline::from_config(config, StageRegistry::builtin());
      graph.find("sampler")->source().restore({{"epoch", 0}, {"position", first_sample}});

      std::vector<PendingRows> pending(builders.size());
      std::vector<int64_t> pending_ids;
      int64_t next_shard = first_missing;
      auto flush_shard = [&] {
        for (size_t b = 0; b < builders.size(); ++b) {
          PendingRows& rows = pending[b];
          std::vector<ValueRows> values;
          at::Tensor block, context, mask;
          if (builder_fields[b] == "vlm") {
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
          if (!builders[b]->shard_complete(next_shard)) {
            builders[b]->write_shard(next_shard, pending_ids, values);
          }
          rows = PendingRows{};
        }
        dist::test_exit_point("cache_shard");
        pending_ids.clear();
        ++next_shard;
      };
      static const std::map<std::string, std::string> kLatentOf = {
          {"current", "video_latents"},
          {"memory_anchor", "memory_video_anchor_latents"},
          {"memory_recent", "memory_video_recent_latents"}};
      int64_t done = first_sample;
      RunOptions run_options;
      run_options.on_output = [&](const Sample& batch) {
        const at::Tensor ids = batch.tensor("sample_id").to(at::kCPU);
        const int64_t rows = ids.size(0);
        std::vector<at::Tensor> outputs(builders.size()), masks(builders.size());
        for (size_t b = 0; b < builders.size(); ++b) {
          if (builder_fields[b] == "vlm") {
            outputs[b] = batch.tensor("vlm_context").to(at::kCPU);
            masks[b] = batch.tensor("vlm_mask").to(at::kCPU);
          } else {
            outputs[b] = batch.tensor(kLatentOf.at(builder_fields[b])).to(at::kCPU);
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t id = ids[r].item<int64_t>();
          if (id != done) {
            throw Error("cache generate: sample " + std::to_string(id) + " arrived where sample " +
                        std::to_string(done) +
                        " was expected; the generation graph must keep "
                        "sample id order");
          }
          pending_ids.push_back(id);
          for (size_t b = 0; b < builders.size(); ++b) {
            if (builder_fields[b] == "vlm") {
              auto [context, mask] = crop_vlm_row(outputs[b][r], masks[b][r]);
              pending[b].context.push_back(std::move(context));
              pending[b].mask.push_back(std::move(mask));
            } else {
              at::Tensor latent = outputs[b][r].contiguous();
              check_latent(latent, builders[b]->values()[0], builders[b]->artifact_id());
              pending[b].rows.push_back(std::move(latent));
            }
          }
          ++done;
          if (static_cast<int64_t>(pending_ids.size()) == shard_size || done == end_sample) {
            flush_shard();
          }
        }
        if (options.on_progress) {
          options.on_progress(done - block_begin * shard_size,
                              end_sample - std::min(block_begin * shard_size, end_sample));
        }
      };
      run_options.interrupt = options.interrupt;
      RunResult run = run_pipeline(graph, run_options);
      if (run.error) throw *run.error;
      if (run.stats.stop_reason == "interrupted" && done != end_sample) {
        // The shard being filled is dropped: shards are whole sample id ranges, the unit of
        // resume.
        result.interrupted = true;
        result.samples_kept =
            std::min(next_shard * shard_size, end_sample) - block_begin * shard_size;
        result.samples_encoded = std::min(next_shard * shard_size, end_sample) - first_sample;
        if (world.distributed()) {
          throw Error("cache generate: interrupted on rank " + std::to_string(world.rank()) +
                      " after " + std::to_string(result.samples_kept) +
                      " samples of its block; the shards written stay staged for a rerun");
        }
        return;
      }
      if (done != end_sample) {
        throw Error("cache generate: the data path produced samples up to " + std::to_string(done) +
                    " of [" + std::to_string(first_sample) + ", " + std::to_string(end_sample) +
                    ")");
      }
      result.samples_encoded = end_sample - first_sample;
    }
  };
  if (!world.distributed()) {
    encode();
  } else {
    on_every_rank(world, "encoding", encode);
  }
  auto publish = [&] {
    if (world.rank() != 0 || result.interrupted) return;
    for (auto& builder : builders) result.published.push_back(builder->publish(options.overwrite));
  };
  if (!world.distributed()) {
    publish();
  } else {
    on_every_rank(world, "publishing", publish);
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

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
