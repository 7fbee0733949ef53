// EpisodeSampler: the source of the robot data path. One sample per frame index of the
// concatenated episodes of one or more LeRobot datasets, in a seeded per-epoch order, sharded over
// ranks. It plans which video frames a sample needs (decoding is VideoDecode's job) and emits the
// normalised actions and proprio merged into the 80-D layout, with pad flags for every index that
// fell outside the episode and was clamped back into it.
//
// Writes: sample_id, epoch, episode_index, frame_index (Int); task, prompt (String); video_files,
// frame_plan (Json: {fps, anchor, recent, window[9]} frame indices in the episode, and
// video_offsets [per camera] where an mp4 holds several episodes (v3.0)); image_is_pad [9],
// memory_video_anchor_is_pad [1], memory_video_recent_is_pad [1] (bool); action [32,80],
// action_is_pad [32], action_dim_is_pad [80]; proprio [32,80], proprio_is_pad [32],
// proprio_dim_is_pad [80]; memory_video_anchor_proprio [1,80], memory_video_recent_proprio [1,80]
// (float32 / bool).
//
// Order: per epoch a Fisher-Yates shuffle driven by std::mt19937_64 seeded from (seed, epoch), with
// j = rng() % (i + 1) (no std::uniform_int_distribution: its output differs between standard
// libraries). The permutation of n samples is cut to max_samples, then padded by wrapping around
// to ceil(n / W) * W entries (as torch's DistributedSampler pads), and rank r takes positions r,
// r + W, ... So every rank gets ceil(n / W) samples (the same count: no rank waits forever on an
// uneven shard), the ranks' shards of an epoch are disjoint and cover the n samples exactly once,
// plus the (ceil(n / W) * W - n) < W padding samples, which repeat the epoch's first entries on
// the last ranks. rank and world_size default to the launcher's RANK and WORLD_SIZE
// (common/distributed.h), 0 and 1 without a launcher.
//
// Example: {"id": "sampler", "type": "EpisodeSampler", "params": {"dataset_dirs":
// ["data/robotwin"],
//           "cameras": ["observation.images.cam_high", "observation.images.cam_left_wrist",
//                       "observation.images.cam_right_wrist"], "normalization": "z_score"}}
#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "common/distributed.h"
#include "common/seeding.h"
#include "data/dataset_sampler.h"
#include "data/episode_sampler_params.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "wam/registry.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

constexpr int64_t kMergedDim = 80;
constexpr uint64_t kProprioNoiseStream = 0x70726f7072696f;  // "proprio": separates noise from order

using seeding::mix_seed;

// What a layout's params alone decide; its source dims are checked once the dataset is open.
void check_layout(ParamChecker& c, const char* name, const Layout& layout) {
  std::vector<bool> taken(kMergedDim, false);
  for (size_t i = 0; i < layout.size(); ++i) {
    const auto& r = layout[i];
    const std::string entry = std::string(name) + "/" + std::to_string(i);
    const std::string shown = nlohmann::json(r).dump();
    if (r.size() != 3) {
      c.error(entry, "expected [src_begin, src_end, dst_begin], got " + shown);
      continue;
    }
    if (r[0] < 0 || r[1] <= r[0]) {
      c.error(entry,
              "source range [src_begin, src_end) must be non-empty and start at 0 or "
              "later, got " +
                  shown);
      continue;
    }
    const int64_t dst_end = r[2] + (r[1] - r[0]);
    if (r[2] < 0 || dst_end > kMergedDim) {
      c.error(entry, "destination must lie in [0, 80), got " + shown);
      continue;
    }
    for (int64_t d = r[2]; d < dst_end; ++d) {
      if (taken[d]) {
        c.error(entry, "destination dim " + std::to_string(d) + " is used twice, in " + shown);
        break;
      }
      taken[d] = true;
    }
  }
}

}  // namespace

void EpisodeSamplerParams::check(ParamChecker& c) const {
  const int64_t horizon = num_frames - 1;
  if (horizon % action_video_freq_ratio != 0) {
    c.error("num_frames",
            "Action horizon must be divisible by action_video_freq_ratio: "
            "num_frames-1=" +
                std::to_string(horizon) +
                ", action_video_freq_ratio=" + std::to_string(action_video_freq_ratio));
  } else if ((horizon / action_video_freq_ratio) % 4 != 0) {
    c.error("num_frames",
            "The sampled RGB window must satisfy T % 4 == 1 for the Wan VAE: num_frames=" +
                std::to_string(num_frames) +
                " and action_video_freq_ratio=" + std::to_string(action_video_freq_ratio) +
                " give T=" + std::to_string(horizon / action_video_freq_ratio + 1));
  }
  if ((rank < 0) != (world_size < 0)) {
    c.error(rank < 0 ? "rank" : "world_size",
            "set both rank and world_size, or neither (then the launcher's RANK and "
            "WORLD_SIZE apply)");
  } else if (world_size == 0) {
    c.error("world_size", "world_size must be >= 1, or -1 for the launcher's WORLD_SIZE");
  } else if (rank >= 0) {
    c.require(
        rank < world_size, "rank",
        "rank " + std::to_string(rank) + " must be < world_size " + std::to_string(world_size));
  }
  check_layout(c, "action_layout", action_layout);
  check_layout(c, "state_layout", state_layout);
}

namespace {

struct Range {
  int64_t src_begin, src_end, dst_begin;
};

// The checked layout as ranges; only the source dims, known once the dataset is open, are left
// to check.
std::vector<Range> to_ranges(const Layout& layout, const char* name, int64_t src_dims) {
  std::vector<Range> ranges;
  for (size_t i = 0; i < layout.size(); ++i) {
    const auto& r = layout[i];
    if (r[1] > src_dims) {
      throw Error(std::string("EpisodeSampler param ") + name + "[" + std::to_string(i) + "] " +
                  nlohmann::json(r).dump() + ": source range must lie in [0, " +
                  std::to_string(src_dims) + ") of the dataset's dims");
    }
    ranges.push_back({r[0], r[1], r[2]});
  }
  return ranges;
}

// Per-dimension affine normalisation: x * scale + offset.
struct Normalizer {
  std::vector<float> scale, offset;

  static Normalizer make(const data::FeatureStats& s, Normalization mode) {
    Normalizer n;
    for (size_t d = 0; d < s.min.size(); ++d) {
      if (mode == Normalization::kMinMax) {  // to [-1, 1]
        double range = std::max(s.max[d] - s.min[d], 1e-6);
        n.scale.push_back(static_cast<float>(2.0 / range));
        n.offset.push_back(static_cast<float>(-2.0 * s.min[d] / range - 1.0));
      } else {  // z_score
        double std = std::max(s.std[d], 1e-6);
        n.scale.push_back(static_cast<float>(1.0 / std));
        n.offset.push_back(static_cast<float>(-s.mean[d] / std));
      }
    }
    return n;
  }
  void apply(data::FloatColumn& column) const {
    for (int64_t r = 0; r < column.rows; ++r) {
      for (int64_t d = 0; d < column.cols; ++d) {
        float& v = column.values[r * column.cols + d];
        v = v * scale[d] + offset[d];
      }
    }
  }
};

// The reference's LiberoRight80NoFrameTransform (docs/DESIGN.md section 5.2: ee 6 -> 9,
// gripper 2 -> 1, normalization_passthrough_dims.state.ee [3..8]; its source confirms what the
// doc leaves open): the ee axis-angle r becomes the column-first 6-D rotation, i.e. the first two
// columns of R = exp([r]x) one after the other (R00 R10 R20 R01 R11 R21), and the two gripper
// finger positions the aperture (g0 - g1) / 2.
constexpr int64_t kLiberoStateDims = 15;   // joint 7, ee position 3, ee axis-angle 3, gripper 2
constexpr int64_t kLiberoAxisAngle = 10;   // first axis-angle dim of the raw state
constexpr int64_t kLiberoGripper = 13;     // first gripper dim of the raw state
constexpr int64_t kLiberoRot6dBegin = 10;  // in the transformed state
constexpr int64_t kLiberoTransformedDims = 17;

// Rodrigues' formula; near zero the series of sin(t)/t and (1 - cos t)/t^2.
std::array<double, 6> axis_angle_to_rot6d(double x, double y, double z) {
  const double theta2 = x * x + y * y + z * z;
  double a, b;  // R = I + a K + b K^2, K the cross-product matrix of (x, y, z)
  if (theta2 < 1e-12) {
    a = 1.0 - theta2 / 6.0;
    b = 0.5 - theta2 / 24.0;
  } else {
    const double theta = std::sqrt(theta2);
    a = std::sin(theta) / theta;
    b = (1.0 - std::cos(theta)) / theta2;
  }
  // K^2 = r r^T - theta^2 I.
  const double r00 = 1.0 + b * (x * x - theta2), r10 = a * z + b * x * y, r20 = -a * y + b * x * z;
  const double r01 = -a * z + b * x * y, r11 = 1.0 + b * (y * y - theta2), r21 = a * x + b * y * z;
  return {r00, r10, r20, r01, r11, r21};
}

data::FloatColumn libero_ee_rot6d(const data::FloatColumn& state, const std::string& file) {
  if (state.cols != kLiberoStateDims) {
    throw Error(file +
                ": state_transform libero_ee_rot6d needs LIBERO's 15-D observation.state "
                "[joint 7, ee position 3, ee axis-angle 3, gripper 2], got " +
                std::to_string(state.cols) + " dims");
  }
  data::FloatColumn out{state.rows, kLiberoTransformedDims, {}};
  out.values.reserve(static_cast<size_t>(state.rows * kLiberoTransformedDims));
  for (int64_t r = 0; r < state.rows; ++r) {
    for (int64_t d = 0; d < kLiberoAxisAngle; ++d) out.values.push_back(state.at(r, d));
    for (double v :
         axis_angle_to_rot6d(state.at(r, kLiberoAxisAngle), state.at(r, kLiberoAxisAngle + 1),
                             state.at(r, kLiberoAxisAngle + 2))) {
      out.values.push_back(static_cast<float>(v));
    }
    out.values.push_back(0.5f * (state.at(r, kLiberoGripper) - state.at(r, kLiberoGripper + 1)));
  }
  return out;
}

struct Episode {
  size_t dataset = 0;
  int64_t episode_index = 0;
  int64_t length = 0;
  int64_t global_start = 0;
  std::vector<std::string> video_files;
  std::vector<int64_t> video_frame_offsets;  // per camera: the episode's first frame in its file
  data::FloatColumn action, state;           // normalised
  std::vector<int64_t> task_index;           // per frame; empty when the dataset has no such column
  std::string default_task;
  // Rows holding a NaN or an infinity (on_error skip: the samples touching them are skipped).
  std::string file;
  std::vector<data::NonFiniteRow> bad_action, bad_state, bad_timestamp;
};

// The first of `rows` (sorted) in [begin, end], or null.
const data::NonFiniteRow* first_bad_row(const std::vector<data::NonFiniteRow>& rows, int64_t begin,
                                        int64_t end) {
  auto it = std::lower_bound(rows.begin(), rows.end(), begin,
                             [](const data::NonFiniteRow& r, int64_t row) { return r.row < row; });
  return it != rows.end() && it->row <= end ? &*it : nullptr;
}

// Why training refuses a non-finite value, after "<file>: <which value>".
constexpr const char* kNeedsFinite =
    "training needs finite values: fix or drop the episode (`wam-pipeline dataset inspect` lists "
    "every such episode)";

class EpisodeSampler final : public Source, public DatasetSampler {
 public:
  static constexpr std::string_view kType = "EpisodeSampler";
  static constexpr std::string_view kSummary =
      "Source: one sample per frame of LeRobot episodes; frame plan, normalised 80-D actions and "
      "proprio, seeded shuffle, sharding, resumable.";
  using Params = EpisodeSamplerParams;

  explicit EpisodeSampler(Params p) : p_(std::move(p)) {}

  const std::vector<std::string>& dataset_dirs() const override { return p_.dataset_dirs; }
  const EpisodeSamplerParams& sampler_params() const override { return p_; }

  void declare(Contract& c) const override {
    for (const char* name : {"sample_id", "epoch", "episode_index", "frame_index"}) {
      c.writes(name, FieldType::kInt);
    }
    c.writes("task", FieldType::kString);
    c.writes("prompt", FieldType::kString);
    c.writes("video_files", FieldType::kJson);
    c.writes("frame_plan", FieldType::kJson);
    for (const char* name :
         {"image_is_pad", "memory_video_anchor_is_pad", "memory_video_recent_is_pad", "action",
          "action_is_pad", "action_dim_is_pad", "proprio", "proprio_is_pad", "proprio_dim_is_pad",
          "memory_video_anchor_proprio", "memory_video_recent_proprio"}) {
      c.writes(name, FieldType::kTensor);
    }
  }

  void open(Context& context) override {
    seed_ = static_cast<uint64_t>(context.settings().seed);
    epochs_ = context.settings().epochs;
    load(data::open_datasets(p_.dataset_dirs), context);

    if (p_.world_size < 0) {
      rank_ = dist::launch_env().rank;
      world_size_ = dist::launch_env().world_size;
    } else {
      rank_ = p_.rank;
      world_size_ = p_.world_size;
    }
    per_epoch_ = total_frames_;
    if (p_.max_samples > 0) per_epoch_ = std::min(per_epoch_, p_.max_samples);
    if (per_epoch_ < world_size_) {
      throw Error("EpisodeSampler: " + std::to_string(per_epoch_) +
                  " samples per epoch cannot be shared by world_size " +
                  std::to_string(world_size_) + " ranks (each needs one at least)");
    }
    per_rank_ = (per_epoch_ + world_size_ - 1) / world_size_;
    check_position();
    opened_ = true;
    const int64_t padding = per_rank_ * world_size_ - per_epoch_;
    context.log(
        "EpisodeSampler: " + std::to_string(episodes_.size()) + " episodes, " +
        std::to_string(total_frames_) + " frames; " + std::to_string(per_rank_) +
        " samples per epoch for rank " + std::to_string(rank_) + "/" + std::to_string(world_size_) +
        (padding > 0
             ? " (" + std::to_string(padding) + " padding samples repeat the epoch's first ones)"
             : std::string()));
  }

  std::optional<Sample> next() override {
    while (epoch_ < epochs_) {
      if (order_epoch_ != epoch_) build_order();
      if (position_ < per_rank_) {
        const int64_t sample_id = order_[(rank_ + position_ * world_size_) % per_epoch_];
        ++position_;
        return make_sample(sample_id);
      }
      ++epoch_;
      position_ = 0;
    }
    return std::nullopt;
  }

  nlohmann::json state() const override { return {{"epoch", epoch_}, {"position", position_}}; }

  void restore(const nlohmann::json& state) override {
    if (!state.is_object() || !state.contains("epoch") || !state.contains("position") ||
        !state["epoch"].is_number_integer() || !state["position"].is_number_integer()) {
      throw Error("EpisodeSampler: cannot restore from " + state.dump() +
                  ": expected {\"epoch\": int, \"position\": int}");
    }
    epoch_ = state["epoch"].get<int64_t>();
    position_ = state["position"].get<int64_t>();
    if (opened_) check_position();
  }

 private:
  void check_position() const {
    if (epoch_ < 0 || position_ < 0 || position_ > per_rank_) {
      throw Error("EpisodeSampler: saved state {epoch " + std::to_string(epoch_) + ", position " +
                  std::to_string(position_) + "} does not fit this dataset (" +
                  std::to_string(per_rank_) +
                  " samples per epoch for this rank); was it saved with other params?");
    }
  }

  void load(const std::vector<data::LeRobotDataset>& datasets, Context& context) {
    std::vector<data::FeatureStats> action_parts, state_parts;
    int64_t bad_episodes = 0;
    for (size_t d = 0; d < datasets.size(); ++d) {
      const auto& ds = datasets[d];
      tasks_.push_back(ds.tasks());
      fps_ = ds.info().fps;
      for (const auto& camera : p_.cameras) {
        const data::Feature* feature = ds.info().feature(camera);
        if (!feature || feature->dtype != "video") {
          throw Error(ds.root() + "/meta/info.json: camera " + camera +
                      " is not a video feature (video features: " +
                      join(ds.info().video_keys(), ", ") + ")");
        }
      }
      // Per-episode stats pooled, or meta/stats.json; throws naming the files when neither has
      // them or their length is not the feature's.
      action_parts.push_back(ds.feature_stats("action"));
      if (!libero_transform()) state_parts.push_back(ds.feature_stats("observation.state"));
      for (const auto& info : ds.episodes()) {
        Episode e;
        e.dataset = d;
        e.episode_index = info.episode_index;
        e.length = info.length;
        e.global_start = total_frames_;
        e.default_task = info.tasks.empty() ? std::string() : info.tasks.front();
        for (const auto& camera : p_.cameras) {
          data::VideoSegment segment = ds.video_segment(info.episode_index, camera);
          if (!std::filesystem::exists(segment.file)) {
            throw Error(segment.file + ": missing video of camera " + camera + " for episode " +
                        std::to_string(info.episode_index));
          }
          // v3.0 mp4s hold several episodes: this one starts at frame from_timestamp * fps.
          e.video_frame_offsets.push_back(std::llround(segment.from_timestamp * ds.info().fps));
          e.video_files.push_back(std::move(segment.file));
        }
        data::EpisodeData columns = ds.read_episode(info.episode_index);
        e.file = ds.data_file(info.episode_index);
        for (const char* key : {"action", "observation.state"}) {
          if (!columns.floats.count(key)) {
            throw Error(e.file + ": no \"" + key + "\" column");
          }
        }
        find_non_finite(e, columns, context.on_error());
        bad_episodes += !e.bad_action.empty() || !e.bad_state.empty() || !e.bad_timestamp.empty();
        e.action = std::move(columns.floats["action"]);
        e.state = std::move(columns.floats["observation.state"]);
        if (libero_transform()) e.state = libero_ee_rot6d(e.state, e.file);
        if (columns.ints.count("task_index")) e.task_index = std::move(columns.ints["task_index"]);
        // episode stats describe the raw state: the transformed one's are computed here, from
        // the rows that can be served.
        if (libero_transform()) state_parts.push_back(data::compute_stats(finite_rows(e.state)));
        total_frames_ += e.length;
        episodes_.push_back(std::move(e));
      }
    }
    const int64_t action_dims = episodes_.front().action.cols;
    const int64_t state_dims = episodes_.front().state.cols;
    for (const auto& e : episodes_) {
      if (e.action.cols != action_dims || e.state.cols != state_dims) {
        throw Error(datasets[e.dataset].data_file(e.episode_index) + ": action/state have " +
                    std::to_string(e.action.cols) + "/" + std::to_string(e.state.cols) +
                    " dims, but the first episode has " + std::to_string(action_dims) + "/" +
                    std::to_string(state_dims));
      }
    }
    action_layout_ = to_ranges(p_.action_layout, "action_layout", action_dims);
    state_layout_ = to_ranges(p_.state_layout, "state_layout", state_dims);
    const auto action_norm =
        Normalizer::make(data::aggregate_stats(action_parts), p_.normalization);
    auto state_norm = Normalizer::make(data::aggregate_stats(state_parts), p_.normalization);
    if (libero_transform()) {  // normalization_passthrough_dims.state.ee: [3..8]
      for (int64_t d = kLiberoRot6dBegin; d < kLiberoRot6dBegin + 6; ++d) {
        state_norm.scale[d] = 1.0f;
        state_norm.offset[d] = 0.0f;
      }
    }
    for (auto& e : episodes_) {
      action_norm.apply(e.action);
      state_norm.apply(e.state);
    }
    if (bad_episodes > 0) {
      context.log("EpisodeSampler: " + std::to_string(bad_episodes) +
                  " episodes hold NaN or infinite values (on_error: skip): the samples whose "
                  "windows touch them are skipped and counted");
    }
  }

  // Normalised and served, a NaN or an infinity would train silently. With on_error fail the
  // first one fails the open; with skip, the rows are kept so that make_sample refuses the
  // samples whose windows touch them (the runtime skips and counts those).
  static void find_non_finite(Episode& e, const data::EpisodeData& columns, OnError on_error) {
    const std::pair<const char*, std::vector<data::NonFiniteRow>*> checked[] = {
        {"action", &e.bad_action},
        {"observation.state", &e.bad_state},
        {"timestamp", &e.bad_timestamp}};
    for (const auto& [key, rows] : checked) {
      const auto column = columns.floats.find(key);
      if (column == columns.floats.end()) continue;
      *rows = data::non_finite_rows(key, e.episode_index, column->second);
      if (!rows->empty() && on_error == OnError::kFail) {
        throw Error(e.file + ": " + rows->front().description + "; " + kNeedsFinite);
      }
    }
  }

  // The rows of `column` whose values are all finite.
  static data::FloatColumn finite_rows(const data::FloatColumn& column) {
    data::FloatColumn out{0, column.cols, {}};
    for (int64_t r = 0; r < column.rows; ++r) {
      const auto row = column.values.begin() + r * column.cols;
      if (!std::all_of(row, row + column.cols, [](float v) { return std::isfinite(v); })) continue;
      out.values.insert(out.values.end(), row, row + column.cols);
      ++out.rows;
    }
    return out;
  }

  // Throws when the sample's window reads a non-finite row: the action and proprio rows
  // [frame, frame + horizon), clamped, the proprio of the anchor (row 0) and the recent memory
  // frame, and the timestamps of every video frame it plans.
  void check_finite(const Episode& e, int64_t sample_id, int64_t frame, int64_t recent,
                    const nlohmann::json& window) const {
    if (e.bad_action.empty() && e.bad_state.empty() && e.bad_timestamp.empty()) return;
    const int64_t rows_end = std::min(frame + p_.num_frames - 2, e.length - 1);
    const data::NonFiniteRow* bad = first_bad_row(e.bad_action, frame, rows_end);
    for (int64_t row : {int64_t{0}, recent}) {
      if (!bad) bad = first_bad_row(e.bad_state, row, row);
    }
    if (!bad) bad = first_bad_row(e.bad_state, frame, rows_end);
    for (int64_t row : {int64_t{0}, recent}) {
      if (!bad) bad = first_bad_row(e.bad_timestamp, row, row);
    }
    for (const auto& index : window) {
      if (!bad) bad = first_bad_row(e.bad_timestamp, index.get<int64_t>(), index.get<int64_t>());
    }
    if (bad) {
      throw Error(e.file + ": " + bad->description +
                  ", in the window of sample:" + std::to_string(sample_id) + "; " + kNeedsFinite);
    }
  }

  bool libero_transform() const { return p_.state_transform == StateTransform::kLiberoEeRot6d; }

  void build_order() {
    order_.resize(static_cast<size_t>(total_frames_));
    for (int64_t i = 0; i < total_frames_; ++i) order_[i] = i;
    if (p_.shuffle) {
      std::mt19937_64 rng(mix_seed(seed_, static_cast<uint64_t>(epoch_)));
      for (int64_t i = total_frames_ - 1; i > 0; --i) {
        std::swap(order_[i], order_[rng() % static_cast<uint64_t>(i + 1)]);
      }
    }
    order_epoch_ = epoch_;
  }

  // Writes one row of `column` (clamped row `row`) merged into out[80].
  static void merge_row(const data::FloatColumn& column, int64_t row,
                        const std::vector<Range>& layout, float* out) {
    for (const auto& r : layout) {
      for (int64_t k = 0; k < r.src_end - r.src_begin; ++k) {
        out[r.dst_begin + k] = column.at(row, r.src_begin + k);
      }
    }
  }

  static torch::Tensor dim_pad_mask(const std::vector<Range>& layout) {
    torch::Tensor mask = torch::ones({kMergedDim}, torch::kBool);
    bool* m = mask.data_ptr<bool>();
    for (const auto& r : layout) {
      for (int64_t d = r.dst_begin; d < r.dst_begin + (r.src_end - r.src_begin); ++d) m[d] = false;
    }
    return mask;
  }

  Sample make_sample(int64_t sample_id) const {
    auto it = std::upper_bound(episodes_.begin(), episodes_.end(), sample_id,
                               [](int64_t id, const Episode& e) { return id < e.global_start; });
    const Episode& e = *(it - 1);
    const int64_t frame = sample_id - e.global_start;
    const int64_t last = e.length - 1;
    const int64_t horizon = p_.num_frames - 1;
    const int64_t window_size = horizon / p_.action_video_freq_ratio + 1;

    Sample s("sample:" + std::to_string(sample_id));
    s.set("sample_id", sample_id);
    s.set("epoch", epoch_);
    s.set("episode_index", e.episode_index);
    s.set("frame_index", frame);
    std::string task = e.default_task;
    if (!e.task_index.empty()) {
      const auto& tasks = tasks_[e.dataset];
      auto t = tasks.find(e.task_index[frame]);
      if (t != tasks.end()) task = t->second;
    }
    s.set("prompt", data::instruction_prompt(task));
    s.set("task", std::move(task));
    s.set("video_files", nlohmann::json(e.video_files));

    const bool recent_is_pad = frame < p_.memory_recent_frame_offset;
    const int64_t recent = recent_is_pad ? 0 : frame - p_.memory_recent_frame_offset;
    nlohmann::json window = nlohmann::json::array();
    torch::Tensor image_is_pad = torch::zeros({window_size}, torch::kBool);
    for (int64_t k = 0; k < window_size; ++k) {
      const int64_t index = frame + k * p_.action_video_freq_ratio;
      window.push_back(std::min(index, last));
      image_is_pad.data_ptr<bool>()[k] = index > last;
    }
    check_finite(e, sample_id, frame, recent, window);
    nlohmann::json plan = {{"fps", fps_}, {"anchor", 0}, {"recent", recent}, {"window", window}};
    if (std::any_of(e.video_frame_offsets.begin(), e.video_frame_offsets.end(),
                    [](int64_t offset) { return offset != 0; })) {
      plan["video_offsets"] = e.video_frame_offsets;
    }
    s.set("frame_plan", std::move(plan));
    s.set_tensor("image_is_pad", image_is_pad);
    s.set_tensor("memory_video_anchor_is_pad", torch::zeros({1}, torch::kBool));
    s.set_tensor("memory_video_recent_is_pad", torch::full({1}, recent_is_pad, torch::kBool));

    torch::Tensor action = torch::zeros({horizon, kMergedDim}, torch::kFloat);
    torch::Tensor action_is_pad = torch::zeros({horizon}, torch::kBool);
    torch::Tensor proprio = torch::zeros({horizon, kMergedDim}, torch::kFloat);
    torch::Tensor proprio_is_pad = torch::zeros({horizon}, torch::kBool);
    for (int64_t i = 0; i < horizon; ++i) {
      const int64_t index = frame + i;
      const int64_t row = std::min(index, last);
      merge_row(e.action, row, action_layout_, action.data_ptr<float>() + i * kMergedDim);
      merge_row(e.state, row, state_layout_, proprio.data_ptr<float>() + i * kMergedDim);
      action_is_pad.data_ptr<bool>()[i] = index > last;
      proprio_is_pad.data_ptr<bool>()[i] = index > last;
    }
    torch::Tensor proprio_dim_is_pad = dim_pad_mask(state_layout_);
    if (p_.state_noise_std > 0) add_proprio_noise(proprio, proprio_dim_is_pad, sample_id);

    torch::Tensor anchor_proprio = torch::zeros({1, kMergedDim}, torch::kFloat);
    torch::Tensor recent_proprio = torch::zeros({1, kMergedDim}, torch::kFloat);
    merge_row(e.state, 0, state_layout_, anchor_proprio.data_ptr<float>());
    merge_row(e.state, recent, state_layout_, recent_proprio.data_ptr<float>());

    s.set_tensor("action", action);
    s.set_tensor("action_is_pad", action_is_pad);
    s.set_tensor("action_dim_is_pad", dim_pad_mask(action_layout_));
    s.set_tensor("proprio", proprio);
    s.set_tensor("proprio_is_pad", proprio_is_pad);
    s.set_tensor("proprio_dim_is_pad", proprio_dim_is_pad);
    s.set_tensor("memory_video_anchor_proprio", anchor_proprio);
    s.set_tensor("memory_video_recent_proprio", recent_proprio);
    return s;
  }

  // N(0, state_noise_std) on every real dim of the proprio rows, from (seed, epoch, sample id) so
  // the same sample gets the same noise whatever the thread count. Box-Muller on mt19937_64 output
  // keeps the values identical across standard libraries.
  void add_proprio_noise(torch::Tensor& proprio, const torch::Tensor& dim_is_pad,
                         int64_t sample_id) const {
    std::mt19937_64 rng(
        mix_seed(mix_seed(mix_seed(seed_, kProprioNoiseStream), static_cast<uint64_t>(epoch_)),
                 static_cast<uint64_t>(sample_id)));
    auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; };
    float* values = proprio.data_ptr<float>();
    const bool* pad = dim_is_pad.data_ptr<bool>();
    for (int64_t i = 0; i < proprio.size(0); ++i) {
      for (int64_t d = 0; d < kMergedDim; ++d) {
        if (pad[d]) continue;
        const double gaussian =
            std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * M_PI * uniform());
        values[i * kMergedDim + d] += static_cast<float>(p_.state_noise_std * gaussian);
      }
    }
  }

  Params p_;
  uint64_t seed_ = 0;
  int64_t epochs_ = 1;
  double fps_ = 0;
  std::vector<Episode> episodes_;
  std::vector<std::map<int64_t, std::string>> tasks_;  // per dataset
  std::vector<Range> action_layout_, state_layout_;
  int64_t total_frames_ = 0;
  int64_t rank_ = 0, world_size_ = 1;
  int64_t per_epoch_ = 0;
  int64_t per_rank_ = 0;
  bool opened_ = false;

  int64_t epoch_ = 0;
  int64_t position_ = 0;  // samples this rank already emitted in epoch_
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

}  // namespace

WAM_REGISTER_STAGE(EpisodeSampler);

}  // namespace wam::stages
