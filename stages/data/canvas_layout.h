// Where each camera goes on the training canvas and how a camera's frame is brought to a size:
// the geometry of the Augment stage, without LibTorch, so that `validate --data` and `dataset
// inspect` report exactly the mapping Augment applies (stages/data/image_ops.cc does the pixels).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "wam/params.h"

namespace wam::image_ops {

// The training canvas every camera layout is composed onto, [H, W].
inline constexpr int64_t kCanvasHeight = 384;
inline constexpr int64_t kCanvasWidth = 256;

// Where each camera goes on the canvas.
struct Rect {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

// `vertical`: the cameras stacked top to bottom in equal rows of the full width.
// `robotwin`: camera 0 on the top two thirds at full width, cameras 1 and 2 side by side in the
// bottom third.
enum class Canvas { kVertical, kRobotwin };
constexpr auto enum_names(Canvas) {
  return std::array{EnumName{Canvas::kVertical, "vertical"},
                    EnumName{Canvas::kRobotwin, "robotwin"}};
}
constexpr int64_t kRobotwinCameras = 3;

// Throws wam::Error when the camera count does not fit the layout.
std::vector<Rect> canvas_layout(Canvas layout, int64_t cameras, int64_t canvas_height,
                                int64_t canvas_width);

// How an image is brought to another size: `stretch` scales each axis on its own (the
// reference's torchvision Resize, docs/DESIGN.md section 5.4: a 4:3 camera in a 2:3 slot is
// squeezed); `fit` scales both axes by the smaller factor and centres the image, the bars left
// over holding a fill level (letterbox); `fill` scales by the larger factor after cutting the
// centre of the image to the target's aspect ratio (centre crop).
enum class ResizeMode { kStretch, kFit, kFill };
constexpr auto enum_names(ResizeMode) {
  return std::array{EnumName{ResizeMode::kStretch, "stretch"}, EnumName{ResizeMode::kFit, "fit"},
                    EnumName{ResizeMode::kFill, "fill"}};
}

// One resize as rectangles: the part of the source that is kept (`source`, the whole image but
// for fill) lands on `target` of the destination (the whole destination but for fit), in pixels.
struct Placement {
  Rect source;
  Rect target;
};

// The placement of a source_height x source_width image in a height x width one. Sizes are
// rounded to whole pixels (at least 1), offsets centre the kept part and the content, leaning to
// the top-left by half a pixel when the difference is odd.
Placement place(ResizeMode mode, int64_t source_height, int64_t source_width, int64_t height,
                int64_t width);

// What the chain of resizes does as a whole, in source and final pixels (fractional where a
// later step cuts a part of an earlier one): the kept part of the source and where it lands.
struct Mapping {
  double source_top = 0, source_left = 0, source_height = 0, source_width = 0;
  double top = 0, left = 0, height = 0, width = 0;
};
Mapping chain(const std::vector<Placement>& steps);

// "640x480 -> camera 256x384 -> slot 256x384 at (0, 0) of the canvas: fit, scale 0.4 x 0.4,
// image 256x192 at offset (0, 96), bars filled with level 0": a camera's way from its video size
// through Augment's camera_size to its slot (sizes W x H, offsets (x, y)).
std::string describe_camera_mapping(int64_t source_height, int64_t source_width,
                                    int64_t camera_height, int64_t camera_width, const Rect& slot,
                                    ResizeMode mode, int64_t fill);

}  // namespace wam::image_ops
