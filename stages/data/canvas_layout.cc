#include "data/canvas_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "wam/error.h"

namespace wam::image_ops {

std::vector<Rect> canvas_layout(Canvas layout, int64_t cameras, int64_t canvas_height,
                                int64_t canvas_width) {
  if (layout == Canvas::kVertical) {
    if (cameras < 1 || canvas_height % cameras != 0) {
      throw Error("canvas \"vertical\" stacks the cameras in equal rows of the " +
                  std::to_string(canvas_height) + "-pixel canvas; " + std::to_string(cameras) +
                  " cameras do not divide it");
    }
    std::vector<Rect> slots;
    const int64_t row = canvas_height / cameras;
    for (int64_t i = 0; i < cameras; ++i) slots.push_back({i * row, 0, row, canvas_width});
    return slots;
  }
  if (cameras != kRobotwinCameras) {
    throw Error("canvas \"robotwin\" needs 3 cameras (high, left wrist, right wrist), got " +
                std::to_string(cameras) + "; check the sampler's cameras");
  }
  const int64_t top = canvas_height * 2 / 3;
  const int64_t half = canvas_width / 2;
  return {{0, 0, top, canvas_width},
          {top, 0, canvas_height - top, half},
          {top, half, canvas_height - top, canvas_width - half}};
}

namespace {

int64_t whole_pixels(double size, int64_t limit) {
  return std::clamp<int64_t>(std::llround(size), 1, limit);
}

}  // namespace

Placement place(ResizeMode mode, int64_t source_height, int64_t source_width, int64_t height,
                int64_t width) {
  Placement p{{0, 0, source_height, source_width}, {0, 0, height, width}};
  const double scale_y = static_cast<double>(height) / static_cast<double>(source_height);
  const double scale_x = static_cast<double>(width) / static_cast<double>(source_width);
  if (mode == ResizeMode::kFit) {
    const double scale = std::min(scale_y, scale_x);
    p.target.height = whole_pixels(static_cast<double>(source_height) * scale, height);
    p.target.width = whole_pixels(static_cast<double>(source_width) * scale, width);
    p.target.top = (height - p.target.height) / 2;
    p.target.left = (width - p.target.width) / 2;
  } else if (mode == ResizeMode::kFill) {
    const double scale = std::max(scale_y, scale_x);
    p.source.height = whole_pixels(static_cast<double>(height) / scale, source_height);
    p.source.width = whole_pixels(static_cast<double>(width) / scale, source_width);
    p.source.top = (source_height - p.source.height) / 2;
    p.source.left = (source_width - p.source.width) / 2;
  }
  return p;
}

Mapping chain(const std::vector<Placement>& steps) {
  Mapping m;
  if (steps.empty()) return m;
  const auto as_double = [](const Rect& r, double& top, double& left, double& height,
                            double& width) {
    top = static_cast<double>(r.top);
    left = static_cast<double>(r.left);
    height = static_cast<double>(r.height);
    width = static_cast<double>(r.width);
  };
  as_double(steps.front().source, m.source_top, m.source_left, m.source_height, m.source_width);
  as_double(steps.front().target, m.top, m.left, m.height, m.width);
  for (size_t i = 1; i < steps.size(); ++i) {
    // What the last step keeps of its input, intersected with where the content lies there.
    double keep_top, keep_left, keep_height, keep_width, to_top, to_left, to_height, to_width;
    as_double(steps[i].source, keep_top, keep_left, keep_height, keep_width);
    as_double(steps[i].target, to_top, to_left, to_height, to_width);
    const double top = std::max(m.top, keep_top);
    const double left = std::max(m.left, keep_left);
    const double bottom = std::min(m.top + m.height, keep_top + keep_height);
    const double right = std::min(m.left + m.width, keep_left + keep_width);
    // Back to the source through the content's scale, forward through this step's.
    const double back_y = m.source_height / m.height, back_x = m.source_width / m.width;
    const double forward_y = to_height / keep_height, forward_x = to_width / keep_width;
    m.source_top += (top - m.top) * back_y;
    m.source_left += (left - m.left) * back_x;
    m.source_height = (bottom - top) * back_y;
    m.source_width = (right - left) * back_x;
    m.top = to_top + (top - keep_top) * forward_y;
    m.left = to_left + (left - keep_left) * forward_x;
    m.height = (bottom - top) * forward_y;
    m.width = (right - left) * forward_x;
  }
  return m;
}

namespace {

// Whole numbers as such, others with three decimals at most: 640, 0.4, 1.5, 0.533.
std::string number(double value) {
  if (std::abs(value - std::round(value)) < 1e-9) return std::to_string(std::llround(value));
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", value);
  std::string out = text;
  while (out.back() == '0') out.pop_back();
  if (out.back() == '.') out.pop_back();
  return out;
}

std::string size(double width, double height) { return number(width) + "x" + number(height); }

}  // namespace

std::string describe_camera_mapping(int64_t source_height, int64_t source_width,
                                    int64_t camera_height, int64_t camera_width, const Rect& slot,
                                    ResizeMode mode, int64_t fill) {
  const Placement to_camera = place(mode, source_height, source_width, camera_height, camera_width);
  std::vector<Placement> steps = {to_camera};
  std::string text = size(static_cast<double>(source_width), static_cast<double>(source_height));
  if (camera_height != slot.height || camera_width != slot.width) {
    steps.push_back(place(mode, camera_height, camera_width, slot.height, slot.width));
    text +=
        " -> camera " + size(static_cast<double>(camera_width), static_cast<double>(camera_height));
  }
  const Mapping m = chain(steps);
  text += " -> slot " + size(static_cast<double>(slot.width), static_cast<double>(slot.height)) +
          " at (" + std::to_string(slot.left) + ", " + std::to_string(slot.top) +
          ") of the canvas: " + std::string(enum_name(mode)) + ", scale " +
          number(m.width / m.source_width) + " x " + number(m.height / m.source_height);
  const double slot_height = static_cast<double>(slot.height);
  const double slot_width = static_cast<double>(slot.width);
  if (m.source_height < static_cast<double>(source_height) - 1e-9 ||
      m.source_width < static_cast<double>(source_width) - 1e-9) {
    text += ", keeps the centre " + size(m.source_width, m.source_height) + " at offset (" +
            number(m.source_left) + ", " + number(m.source_top) + ")";
  }
  if (m.height < slot_height - 1e-9 || m.width < slot_width - 1e-9) {
    text += ", image " + size(m.width, m.height) + " at offset (" + number(m.left) + ", " +
            number(m.top) + "), bars filled with level " + std::to_string(fill);
  }
  // Stretch alone changes the shape of what is seen.
  const double aspect = (m.width / m.height) / (m.source_width / m.source_height);
  if (std::abs(aspect - 1.0) > 0.01) {
    text += " (stretched " + number(aspect > 1 ? aspect : 1 / aspect) + "x " +
            (aspect > 1 ? "wider" : "taller") +
            "; resize \"fit\" or \"fill\" keeps the aspect ratio)";
  }
  return text;
}

}  // namespace wam::image_ops
