#include "data/data_check.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <set>

#include "data/dataset_sampler.h"
#include "wam/error.h"

namespace wam::data {
namespace {

std::string dims_text(const std::vector<int64_t>& range) { return nlohmann::json(range).dump(); }

// "[26, 44)", "[3, 5), [7, 9)": the dims of [0, dims) that no layout range reads.
std::string unread_dims(const stages::Layout& layout, int64_t dims) {
  std::vector<bool> read(static_cast<size_t>(dims), false);
  for (const auto& r : layout) {
    for (int64_t d = std::max<int64_t>(r[0], 0); d < std::min(r[1], dims); ++d) {
      read[static_cast<size_t>(d)] = true;
    }
  }
  std::vector<std::string> ranges;
  for (int64_t d = 0; d < dims;) {
    if (read[static_cast<size_t>(d)]) {
      ++d;
      continue;
    }
    const int64_t begin = d;
    while (d < dims && !read[static_cast<size_t>(d)]) ++d;
    ranges.push_back("[" + std::to_string(begin) + ", " + std::to_string(d) + ")");
  }
  return join(ranges, ", ");
}

// 20, 29.97: as a person writes a frame rate (JSON would write 20.0).
std::string fps_text(double fps) {
  if (fps == std::floor(fps)) return std::to_string(static_cast<int64_t>(fps));
  return nlohmann::json(fps).dump();
}

std::string stats_source(const LeRobotDataset& ds) {
  if (std::filesystem::exists(ds.episodes_stats_path())) return "meta/episodes_stats.jsonl";
  if (ds.has_episode_stats()) return "meta/episodes/ stats columns";
  if (std::filesystem::exists(ds.stats_path())) return "meta/stats.json";
  return "none";
}

// Datasets may declare a camera whose videos were never published (the GR00T demo does): the
// first episode's file is looked for, not opened. "" when it is there.
std::string missing_video(const LeRobotDataset& ds, const std::string& camera) {
  try {
    const std::string file = ds.video_segment(ds.episodes().front().episode_index, camera).file;
    return std::filesystem::exists(file) ? std::string() : file + " is missing";
  } catch (const Error& e) {
    return e.what();
  }
}

struct Vector {
  const char* feature;  // "action", "observation.state"
  const char* layout_name;
  const stages::Layout* layout;
};

// The layout's ranges against the feature's dims in one dataset; returns the dims (-1: unknown).
int64_t check_vector(const LeRobotDataset& ds, const Vector& v,
                     const stages::EpisodeSamplerParams& p, const std::string& pointer,
                     const std::string& node, DataCheckResult& result) {
  const std::string info_path = ds.root() + "/meta/info.json";
  const Feature* feature = ds.info().feature(v.feature);
  const std::string layout_pointer = pointer + "/" + v.layout_name;
  if (!feature) {
    result.diagnostics.error(layout_pointer, info_path + " has no \"" + v.feature + "\" feature",
                             node);
    return -1;
  }
  int64_t dims = 1;
  for (int64_t d : feature->shape) dims *= d;
  std::string where = info_path + " gives " + v.feature + " " + std::to_string(dims) + " dims";
  const bool libero = std::string(v.feature) == "observation.state" &&
                      p.state_transform == stages::StateTransform::kLiberoEeRot6d;
  if (libero) {
    constexpr int64_t kLiberoStateDims = 15, kTransformedDims = 17;
    if (dims != kLiberoStateDims) {
      result.diagnostics.error(
          pointer + "/state_transform",
          "libero_ee_rot6d needs LIBERO's 15-D observation.state, but " + where, node);
      return -1;
    }
    dims = kTransformedDims;
    where += ", 17 after state_transform libero_ee_rot6d";
  }
  for (size_t k = 0; k < v.layout->size(); ++k) {
    const auto& r = (*v.layout)[k];
    if (r.size() == 3 && r[1] > dims) {
      result.diagnostics.error(layout_pointer + "/" + std::to_string(k),
                               dims_text(r) + " reads " + v.feature + " dims [" +
                                   std::to_string(r[0]) + ", " + std::to_string(r[1]) + "), but " +
                                   where,
                               node);
    }
  }
  return dims;
}

}  // namespace

std::optional<FrameSize> video_frame_size(const Feature& feature) {
  const auto& shape = feature.shape;
  if (shape.size() != 3) return std::nullopt;
  const auto height = std::find(feature.names.begin(), feature.names.end(), "height");
  const auto width = std::find(feature.names.begin(), feature.names.end(), "width");
  if (feature.names.size() == 3 && height != feature.names.end() && width != feature.names.end()) {
    return FrameSize{shape[static_cast<size_t>(height - feature.names.begin())],
                     shape[static_cast<size_t>(width - feature.names.begin())]};
  }
  if (shape[2] == 3) return FrameSize{shape[0], shape[1]};
  if (shape[0] == 3) return FrameSize{shape[1], shape[2]};
  return std::nullopt;
}

std::vector<std::optional<FrameSize>> check_sampler_data(const stages::EpisodeSamplerParams& p,
                                                         const std::string& pointer,
                                                         const std::string& node,
                                                         DataCheckResult& result) {
  std::vector<std::optional<FrameSize>> sizes(p.cameras.size());
  std::optional<std::pair<double, std::string>> first_fps;  // fps, root
  for (size_t i = 0; i < p.dataset_dirs.size(); ++i) {
    const std::string dir_pointer = pointer + "/dataset_dirs/" + std::to_string(i);
    std::optional<LeRobotDataset> opened;
    try {
      opened = LeRobotDataset::open(p.dataset_dirs[i]);
    } catch (const Error& e) {
      result.diagnostics.error(dir_pointer, e.what(), node);
      continue;
    }
    const LeRobotDataset& ds = *opened;
    const std::string info_path = ds.root() + "/meta/info.json";
    const DatasetInfo& info = ds.info();
    if (!first_fps) {
      first_fps.emplace(info.fps, ds.root());
    } else if (info.fps != first_fps->first) {
      result.diagnostics.error(dir_pointer,
                               info_path + ": fps " + fps_text(info.fps) + ", but " +
                                   first_fps->second + " has " + fps_text(first_fps->first) +
                                   "; a sampler's datasets must share fps",
                               node);
    }
    const std::string video_keys = "video features: " + join(info.video_keys(), ", ");
    for (size_t j = 0; j < p.cameras.size(); ++j) {
      const std::string camera_pointer = pointer + "/cameras/" + std::to_string(j);
      const Feature* feature = info.feature(p.cameras[j]);
      if (!feature) {
        result.diagnostics.error(
            camera_pointer,
            info_path + " has no feature \"" + p.cameras[j] + "\" (" + video_keys + ")", node);
      } else if (feature->dtype != "video") {
        result.diagnostics.error(camera_pointer,
                                 info_path + ": feature \"" + p.cameras[j] + "\" is " +
                                     feature->dtype + ", not a video (" + video_keys + ")",
                                 node);
      } else if (const std::string missing = missing_video(ds, p.cameras[j]); !missing.empty()) {
        result.diagnostics.error(camera_pointer,
                                 "camera \"" + p.cameras[j] + "\" is a video feature of " +
                                     info_path + " but has no video files (" + missing + ")",
                                 node);
      } else if (!sizes[j]) {
        sizes[j] = video_frame_size(*feature);
      }
    }
    const int64_t action_dims =
        check_vector(ds, {"action", "action_layout", &p.action_layout}, p, pointer, node, result);
    const int64_t state_dims = check_vector(
        ds, {"observation.state", "state_layout", &p.state_layout}, p, pointer, node, result);
    // libero_ee_rot6d's state stats are computed from the transformed columns at open.
    std::vector<const char*> normalised = {"action"};
    if (p.state_transform == stages::StateTransform::kNone)
      normalised.push_back("observation.state");
    for (const char* key : normalised) {
      if (!info.feature(key)) continue;  // reported above
      try {
        ds.feature_stats(key);
      } catch (const Error& e) {
        result.diagnostics.error(pointer + "/normalization", e.what(), node);
      }
    }
    std::string note = "[" + node + "] " + ds.root() + ": LeRobot " + info.codebase_version + ", " +
                       std::to_string(ds.episodes().size()) + " episodes at " + fps_text(info.fps) +
                       " fps";
    if (action_dims >= 0) note += ", action " + std::to_string(action_dims) + "-D";
    if (state_dims >= 0) note += ", state " + std::to_string(state_dims) + "-D";
    note += ", stats: " + stats_source(ds);
    result.notes.push_back(note);
    for (const auto& [dims, name, layout] : {std::tuple{action_dims, "action", &p.action_layout},
                                             std::tuple{state_dims, "state", &p.state_layout}}) {
      if (dims < 0) continue;
      if (const std::string unread = unread_dims(*layout, dims); !unread.empty()) {
        result.notes.push_back("[" + node + "] " + ds.root() + ": " + name + " dims " + unread +
                               " are in no " + name + "_layout range, so the model never sees " +
                               "them");
      }
    }
  }
  return sizes;
}

void check_canvas_mapping(const stages::AugmentParams& augment,
                          const std::vector<std::string>& cameras,
                          const std::vector<std::optional<FrameSize>>& sizes,
                          const std::string& pointer, const std::string& node,
                          DataCheckResult& result) {
  std::vector<image_ops::Rect> slots;
  try {
    slots = image_ops::canvas_layout(augment.canvas, static_cast<int64_t>(cameras.size()),
                                     image_ops::kCanvasHeight, image_ops::kCanvasWidth);
  } catch (const Error& e) {
    result.diagnostics.error(pointer + "/canvas", e.what(), node);
    return;
  }
  for (size_t j = 0; j < cameras.size(); ++j) {
    if (j >= sizes.size() || !sizes[j]) continue;  // not a video of the data: reported
    result.notes.push_back("[" + node + "] " + cameras[j] + ": " +
                           image_ops::describe_camera_mapping(sizes[j]->height, sizes[j]->width,
                                                              augment.camera_size[0],
                                                              augment.camera_size[1], slots[j],
                                                              augment.resize, augment.resize_fill));
  }
}

namespace {

// The samplers' checks, then each canvas against the cameras of the nearest sampler upstream.
void check_pipeline(const ValidatedPipeline& pipeline, DataCheckResult& result) {
  const auto& nodes = pipeline.nodes();
  std::map<size_t, std::vector<std::optional<FrameSize>>> sizes;  // by sampler node
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (const auto* sampler = dynamic_cast<const stages::DatasetSampler*>(nodes[i].stage.get())) {
      sizes[i] = check_sampler_data(sampler->sampler_params(), nodes[i].pointer + "/params",
                                    nodes[i].label(), result);
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto* renderer = dynamic_cast<const stages::CanvasRenderer*>(nodes[i].stage.get());
    if (!renderer || !renderer->canvas_params()) continue;
    std::deque<size_t> queue(nodes[i].inputs.begin(), nodes[i].inputs.end());
    std::set<size_t> seen;
    while (!queue.empty() && !sizes.count(queue.front())) {
      const size_t up = queue.front();
      queue.pop_front();
      if (!seen.insert(up).second) continue;
      queue.insert(queue.end(), nodes[up].inputs.begin(), nodes[up].inputs.end());
    }
    if (queue.empty()) continue;
    const auto& sampler = dynamic_cast<const stages::DatasetSampler&>(*nodes[queue.front()].stage);
    check_canvas_mapping(
        *renderer->canvas_params(), sampler.sampler_params().cameras, sizes[queue.front()],
        nodes[i].pointer + "/params" + renderer->canvas_params_pointer(), nodes[i].label(), result);
  }
}

WAM_REGISTER_DATA_CHECK(lerobot_datasets, check_pipeline);

}  // namespace
}  // namespace wam::data
