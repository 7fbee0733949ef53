// What `wam-pipeline validate --data` checks of the data stages (registered with core's
// DataCheckRegistry, wam/data_check.h): each sampler's params against the meta files of its
// datasets, and how each camera maps onto its canvas slot. Reads meta/ only: no video, no column.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/augment_params.h"
#include "data/episode_sampler_params.h"
#include "formats/lerobot/lerobot_dataset.h"
#include "wam/data_check.h"

namespace wam::data {

// A camera's frame size from its meta/info.json feature: the shape's "height" and "width" names,
// else [H, W, 3] or [3, H, W]; nothing when the shape says neither.
struct FrameSize {
  int64_t height = 0, width = 0;
};
std::optional<FrameSize> video_frame_size(const Feature& feature);

// Checks a sampler's params (effective, at `pointer` of the pipeline file, in node `node`) against
// its datasets' meta files: each opens, they share fps, every camera is a video feature with a
// video file for the first episode (looked for, not opened), the
// action and state layouts read only dims the dataset has (state after state_transform), the
// normalisation stats of action and state exist. Problems go to result.diagnostics at the
// param's pointer, naming the dataset's file; a note per dataset says what was found. Returns the
// frame size of each camera in the first dataset that has it (nothing where none does).
std::vector<std::optional<FrameSize>> check_sampler_data(const stages::EpisodeSamplerParams& params,
                                                         const std::string& pointer,
                                                         const std::string& node,
                                                         DataCheckResult& result);

// Notes how each camera (video size `sizes`, keys `cameras`) maps through camera_size onto its
// slot of the canvas with `augment`'s resize; a camera count the canvas cannot lay out is an
// error at `pointer`/canvas.
void check_canvas_mapping(const stages::AugmentParams& augment,
                          const std::vector<std::string>& cameras,
                          const std::vector<std::optional<FrameSize>>& sizes,
                          const std::string& pointer, const std::string& node,
                          DataCheckResult& result);

}  // namespace wam::data
