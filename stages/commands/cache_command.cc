// `wam-pipeline cache generate|validate|info`: builds, checks and lists the HDF5 latent store that
// a pipeline's LatentCacheLookup node reads (docs/CACHE_FORMAT.md). The work is done by
// cache/cache_generate.h and cache/latent_store.h; this file parses options and prints.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>

#include "cache/cache_generate.h"
#include "cli/command.h"
#include "cli/stop_signals.h"
#include "cli/validators.h"
#include "wam/config.h"
#include "wam/live_view.h"

namespace wam::cli {
namespace {

using Clock = std::chrono::steady_clock;

// "[=====>     ] 1234/5000 samples  45.2 samples/s  ETA 1m23s", redrawn in place on a terminal,
// a line every 10 s otherwise. The rate counts from the first update (a resumed build starts
// there with the samples already written); before a second update there is none, nor an ETA.
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(STDERR_FILENO) != 0) {}

  void update(int64_t done, int64_t total) {
    const Clock::time_point now = Clock::now();
    const double interval = tty_ ? 0.5 : 10.0;
    if (done < total && std::chrono::duration<double>(now - last_).count() < interval) return;
    last_ = now;
    if (!first_) first_ = std::make_pair(now, done);
    const double seconds = std::chrono::duration<double>(now - first_->first).count();
    const double rate = seconds > 0 ? static_cast<double>(done - first_->second) / seconds : 0.0;
    char speed[48] = "- samples/s  ETA -";
    if (rate > 0) {
      std::snprintf(speed, sizeof(speed), "%.1f samples/s  ETA %s", rate,
                    LiveView::duration(static_cast<double>(total - done) / rate).c_str());
    }
    constexpr int kWidth = 30;
    const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
    char line[160];
    std::snprintf(line, sizeof(line), "[%s%s] %lld/%lld samples  %s",
                  std::string(filled, '=').c_str(), std::string(kWidth - filled, ' ').c_str(),
                  static_cast<long long>(done), static_cast<long long>(total), speed);
    // On a terminal: back to the line's start, and erase what a longer line left after it.
    std::cerr << (tty_ ? "\r" : "") << line << (tty_ ? "\x1b[K" : "")
              << (tty_ && done < total ? "" : "\n") << std::flush;
  }

 private:
  bool tty_;
  Clock::time_point last_{};
  std::optional<std::pair<Clock::time_point, int64_t>> first_;
};

std::string default_root() {
  if (auto root = environment_value("WAM_LATENT_CACHE")) return *root;
  return environment_value("WAM_CACHE_ROOT").value_or(".cache/wam") + "/latents";
}

std::string human_bytes(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1 << 30) {
    std::snprintf(text, sizeof(text), "%.2f GiB", b / (1 << 30));
  } else if (b >= 1 << 20) {
    std::snprintf(text, sizeof(text), "%.2f MiB", b / (1 << 20));
  } else {
    std::snprintf(text, sizeof(text), "%.1f KiB", b / 1024);
  }
  return text;
}

}  // namespace

class CacheCommand final : public Command {
 public:
  static constexpr std::string_view kName = "cache";

  explicit CacheCommand(CLI::App& app) {
    cache_ = app.add_subcommand(
        "cache", "Generate, validate and list the HDF5 latent cache of a cache pipeline");
    cache_->require_subcommand(1);

    generate_ = cache_->add_subcommand(
        "generate",
        "Encode the selected fields of every sample with the frozen VAE / VLM (never the "
        "transformer) and publish them atomically; an interrupted run resumes where it stopped");
    generate_
        ->add_option("pipeline", generate_options_.pipeline,
                     "Cache pipeline (its LatentCacheLookup node says what to build)")
        ->required();
    generate_->add_option("--set", generate_options_.overrides,
                          "Override a value before includes resolve (path.to.key=VALUE)");
    generate_->add_option("--fields", fields_,
                          "current,memory_anchor,memory_recent,vlm or all (default: the "
                          "LatentCacheLookup node's fields)");
    generate_
        ->add_option("--max-samples", generate_options_.max_samples,
                     "Encode only sample ids [0, N): a partial vlm cache, whose misses "
                     "are encoded online (0: every sample)")
        ->check(at_least(0));
    generate_
        ->add_option("--shard-size", generate_options_.shard_size,
                     "Samples per HDF5 shard at most (the unit of resume)")
        ->capture_default_str()
        ->check(at_least(1));
    generate_
        ->add_option("--shard-seconds", generate_options_.shard_seconds,
                     "Close a shard early once it holds this many seconds of work, so that an "
                     "interruption loses at most that much (0: after every batch)")
        ->capture_default_str()
        ->check(at_least(0));
    generate_
        ->add_option("--batch-size", generate_options_.batch_size,
                     "Samples per encoder call (default: the pipeline's batch_size)")
        ->check(at_least(1));
    generate_->add_flag("--overwrite", generate_options_.overwrite,
                        "Publish replacement builds of artifacts the cache already holds");

    validate_ = cache_->add_subcommand(
        "validate",
        "Check the cache a pipeline reads against its contract: manifests, indexes, exact key "
        "coverage, shard sizes; --full also every shard's checksum, shapes, dtypes and keys");
    validate_->add_option("pipeline", validate_pipeline_, "Cache pipeline")->required();
    validate_->add_option("--set", validate_overrides_, "Override a value (path.to.key=VALUE)");
    validate_->add_flag("--full", full_, "Read and check every shard (in parallel)");

    info_ = cache_->add_subcommand(
        "info", "List a cache root's artifacts: builds, coverage, bytes and contract summaries");
    info_->add_option("root", info_root_,
                      "Cache root (default: $WAM_LATENT_CACHE, else $WAM_CACHE_ROOT/latents)");
  }

  bool selected() const override { return cache_->parsed(); }

  int run() override {
    if (generate_->parsed()) return run_generate();
    if (validate_->parsed()) return run_validate();
    return run_info();
  }

 private:
  int run_generate() {
    if (!fields_.empty()) generate_options_.fields = {fields_};
    ProgressBar progress;
    generate_options_.on_progress = [&](int64_t done, int64_t total) {
      progress.update(done, total);
    };
    generate_options_.on_resume = [](int64_t first_sample, int64_t shards_resumed) {
      std::cerr << "resuming from sample " << first_sample << ": " << shards_resumed
                << " shards were already written\n";
    };
    std::optional<StopSignals> stop_signals(std::in_place);
    generate_options_.interrupt = stop_signals->flag();
    const cache::GenerateResult result = cache::generate_cache(generate_options_);
    const int signal = stop_signals->signal();
    stop_signals.reset();  // from here a signal ends the process at once
    if (result.interrupted) {
      std::cerr << "\ninterrupted by " << StopSignals::name(signal) << "; " << result.samples_kept
                << " samples kept in whole shards under " << result.root
                << "/.tmp (the shard being filled was dropped); nothing was published. Resume "
                   "with the same command: "
                << (result.samples_kept > 0
                        ? "it starts at sample " + std::to_string(result.samples_kept)
                        : std::string("it starts from the beginning"))
                << "\n";
      return StopSignals::exit_status(signal);
    }
    if (result.world_size > 1) {
      std::cerr << "cache generate: rank " << result.rank << "/" << result.world_size
                << " wrote shards [" << result.shard_begin << ", " << result.shard_end
                << "): " << result.samples_encoded << " samples encoded\n";
    }
    for (const cache::PublishResult& published : result.published) {
      const bool vlm = published.artifact_id.rfind("vlm", 0) == 0;
      char line[512];
      std::snprintf(
          line, sizeof(line),
          "%s cache published: artifact=%s build=%s samples=%lld shards=%lld bytes=%lld "
          "elapsed=%.1fs throughput=%.2f samples/s catalog=%s/catalog.json\n",
          vlm ? "VLM" : "VAE", published.artifact_id.c_str(), published.build_id.c_str(),
          static_cast<long long>(published.samples), static_cast<long long>(published.shards),
          static_cast<long long>(published.bytes), result.seconds,
          result.seconds > 0 ? static_cast<double>(result.samples_encoded) / result.seconds : 0.0,
          result.root.c_str());
      std::cout << line;
    }
    return kExitOk;
  }

  int run_validate() {
    std::string root;
    const auto reports = cache::validate_pipeline_cache(
        validate_pipeline_, validate_overrides_,
        full_ ? cache::ValidationMode::kFull : cache::ValidationMode::kMetaOnly, &root);
    for (const cache::ArtifactReport& report : reports) {
      std::printf("Cache artifact passed: %s build=%s samples=%lld/%lld (%.1f%%)\n",
                  report.artifact_id.c_str(), report.build_id.c_str(),
                  static_cast<long long>(report.cached_samples),
                  static_cast<long long>(report.expected_samples),
                  100.0 * static_cast<double>(report.cached_samples) /
                      static_cast<double>(std::max<int64_t>(report.expected_samples, 1)));
    }
    int64_t total_bytes = 0;
    for (const cache::ArtifactInfo& info : cache::cache_info(root)) total_bytes += info.bytes;
    std::printf("Cache preflight passed: root=%s mode=%s total=%s\n", root.c_str(),
                full_ ? "full" : "meta-only", human_bytes(total_bytes).c_str());
    return kExitOk;
  }

  int run_info() {
    const std::string root = info_root_.empty() ? default_root() : info_root_;
    const std::vector<cache::ArtifactInfo> artifacts = cache::cache_info(root);
    std::printf("%s: %zu artifact%s\n", root.c_str(), artifacts.size(),
                artifacts.size() == 1 ? "" : "s");
    for (const cache::ArtifactInfo& info : artifacts) {
      std::printf("  %-26s build %s  samples %lld (%.1f%% coverage)  shards %lld  %s\n",
                  info.artifact_id.c_str(), info.build_id.c_str(),
                  static_cast<long long>(info.samples), 100 * info.coverage,
                  static_cast<long long>(info.shards), human_bytes(info.bytes).c_str());
      const nlohmann::json& summary = info.contract_summary;
      std::printf("    values %s  key codec %s\n",
                  summary.value("values", nlohmann::json()).dump().c_str(),
                  summary.value("key_codec", "").c_str());
      if (summary.contains("dependencies")) {
        for (const auto& [part, fingerprint] : summary["dependencies"].items()) {
          std::printf("    %-24s %s\n", part.c_str(), fingerprint.dump().c_str());
        }
      }
      if (info.builds.size() > 1) {
        std::printf("    %zu builds on disk (the catalog points at %s)\n", info.builds.size(),
                    info.build_id.c_str());
      }
    }
    return kExitOk;
  }

  CLI::App* cache_ = nullptr;
  CLI::App* generate_ = nullptr;
  CLI::App* validate_ = nullptr;
  CLI::App* info_ = nullptr;
  cache::GenerateOptions generate_options_;
  std::string fields_;
  std::string validate_pipeline_;
  std::vector<std::string> validate_overrides_;
  bool full_ = false;
  std::string info_root_;
};

WAM_REGISTER_COMMAND(CacheCommand);

}  // namespace wam::cli
