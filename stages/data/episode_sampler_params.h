// EpisodeSampler's params (stages/data/episode_sampler.cc), in a header of their own so that other
// stages and commands use them as a type (LatentCacheLookup nests them).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "wam/params.h"

namespace wam::stages {

enum class Normalization { kMinMax, kZScore };
constexpr auto enum_names(Normalization) {
  return std::array{EnumName{Normalization::kMinMax, "min_max"},
                    EnumName{Normalization::kZScore, "z_score"}};
}
enum class StateTransform { kNone, kLiberoEeRot6d };
constexpr auto enum_names(StateTransform) {
  return std::array{EnumName{StateTransform::kNone, "none"},
                    EnumName{StateTransform::kLiberoEeRot6d, "libero_ee_rot6d"}};
}

// Merges dataset dims into the 80-D layout: [[src_begin, src_end, dst_begin], ...].
using Layout = std::vector<std::vector<int64_t>>;

struct EpisodeSamplerParams {
  std::vector<std::string> dataset_dirs;
  std::vector<std::string> cameras;
  int64_t num_frames = 33;
  int64_t action_video_freq_ratio = 4;
  int64_t memory_recent_frame_offset = 32;
  bool shuffle = true;
  int64_t max_samples = 0;
  int64_t rank = -1;
  int64_t world_size = -1;
  Normalization normalization = Normalization::kZScore;
  // RoboTwin's merger into the 80-D layout (docs/DESIGN.md section 5.2).
  Layout action_layout = {{0, 6, 0}, {6, 7, 16}, {7, 13, 40}, {13, 14, 56}};
  Layout state_layout = {{0, 6, 0}, {6, 7, 16}, {7, 13, 40}, {13, 14, 56}};
  double state_noise_std = 0.0;
  StateTransform state_transform = StateTransform::kNone;

  template <class V>
  void visit(V& v) {
    v("dataset_dirs", dataset_dirs, "LeRobot dataset directories used together (same fps).",
      NonEmpty{});
    v("cameras", cameras, "Video feature keys, in the order of video_files.", NonEmpty{});
    v("num_frames", num_frames, "Frames spanned by the window (window = every ratio-th).", Min{2});
    v("action_video_freq_ratio", action_video_freq_ratio, "Actions per RGB window step.", Min{1});
    v("memory_recent_frame_offset", memory_recent_frame_offset,
      "How far back the recent memory frame lies.", Min{1});
    v("shuffle", shuffle, "Seeded shuffle per epoch (else dataset order).");
    v("max_samples", max_samples, "Samples per epoch before sharding (0: all).", Min{0});
    v("rank", rank, "This process's shard (-1: the launcher's RANK, else 0).", Min{-1});
    v("world_size", world_size, "Number of shards (-1: the launcher's WORLD_SIZE, else 1).",
      Min{-1});
    v("normalization", normalization,
      "How action and state are normalised with the dataset stats (LIBERO min_max, RoboTwin "
      "z_score).");
    v("action_layout", action_layout,
      "Merge into 80-D: [[src_begin, src_end, dst_begin], ...] over the action dims.", NonEmpty{});
    v("state_layout", state_layout,
      "Merge into 80-D: [[src_begin, src_end, dst_begin], ...] over the state dims (after "
      "state_transform).",
      NonEmpty{});
    v("state_transform", state_transform,
      "none, or libero_ee_rot6d: LIBERO's 15-D state [joint 7, ee position 3, ee axis-angle 3, "
      "gripper 2] becomes 17-D [joint 7, ee position 3, ee 6-D rotation, gripper aperture 1], "
      "as the reference's LiberoRight80NoFrameTransform; the 6-D rotation is not normalised.");
    v("state_noise_std", state_noise_std,
      "Gaussian noise on the normalised proprio rows, drawn from (seed, epoch, sample id); LIBERO "
      "uses 0.01.",
      Min{0.0});
  }

  void check(ParamChecker& c) const;
};

}  // namespace wam::stages
