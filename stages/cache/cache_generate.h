// `cache generate` and `cache validate` as functions returning what they did, for the command
// and for tests: generate builds the latent cache a pipeline's LatentCacheLookup node reads,
// validate checks it against that node's contracts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "formats/latent_store/artifact_builder.h"
#include "formats/latent_store/latent_store.h"

namespace wam::cache {

struct GenerateOptions {
  std::string pipeline;
  std::vector<std::string> overrides;
  std::vector<std::string> fields;  // empty: the lookup node's
  int64_t max_samples = 0;          // 0: every sample
  int64_t shard_size = 64;          // samples per shard at most, the unit of resume
  // A shard is also closed once this much time has passed since it began (at the end of the
  // batch that crosses it), so an interruption loses at most shard_size samples or about this
  // long of work, whichever is less (docs/RELIABILITY.md, "Signals"). 0: every batch.
  double shard_seconds = 30;
  int64_t batch_size = 0;  // 0: the pipeline's
  bool overwrite = false;
  std::function<void(int64_t done, int64_t total)> on_progress;
  // Called before encoding when earlier runs wrote this rank's first shards: the first sample id
  // to encode and the shards kept.
  std::function<void(int64_t first_sample, int64_t shards_resumed)> on_resume;
  // Set by a signal handler: the encoding stops, the shard being filled is discarded, the shards
  // written stay staged for a rerun, and nothing is published.
  const std::atomic<bool>* interrupt = nullptr;
};

struct GenerateResult {
  int rank = 0;  // of world_size processes under a launcher
  int world_size = 1;
  // This rank's block: sample ids [shard_begin, shard_end) x shard_size (within `samples`). It
  // may be written in more shards than that when some close on time.
  int64_t shard_begin = 0, shard_end = 0;
  std::string root;
  int64_t samples = 0;          // keyspace of this build
  int64_t samples_encoded = 0;  // by this run (resumed shards excluded)
  int64_t shards_resumed = 0;
  bool interrupted = false;  // by options.interrupt: nothing was published
  int64_t samples_kept = 0;  // interrupted: the samples of this rank's shards on disk
  double seconds = 0;
  std::vector<PublishResult> published;  // rank 0 only
};

// Encodes the selected fields of sample ids [0, samples) in a graph of its own (EpisodeSampler in
// sample id order -> VideoDecode -> Augment -> Collate -> HostToDevice -> VaeEncode -> VlmEncode:
// the encoders only), writes them in shards and publishes every artifact. Throws ConfigError for
// random augmentation (naming the param's JSON pointer) and CacheError when an artifact exists
// and `overwrite` is false, both before anything is encoded. Under a launcher the ranks share the
// work (see cache_generate.cc) and a failure on any rank fails every rank, naming it.
GenerateResult generate_cache(const GenerateOptions& options);

struct ArtifactReport {
  std::string artifact_id;
  std::string build_id;
  int64_t cached_samples = 0;
  int64_t expected_samples = 0;
};

// Opens every artifact the pipeline's LatentCacheLookup node reads, against its contract, in
// `mode` (vlm.current may be partial); throws the first problem.
std::vector<ArtifactReport> validate_pipeline_cache(const std::string& pipeline,
                                                    const std::vector<std::string>& overrides,
                                                    ValidationMode mode, std::string* root);

}  // namespace wam::cache
