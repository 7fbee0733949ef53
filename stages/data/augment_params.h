// Augment's params (stages/data/augment.cc), in a header of their own so that other stages and
// commands use them as a type: LatentCacheLookup nests them, and the cache contract asks them which
// params make the images random (the RandomUnless tags) instead of keeping a list of names.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "data/canvas_layout.h"
#include "wam/params.h"

namespace wam::stages {

enum class FrameSet { kAll, kCurrent };
constexpr auto enum_names(FrameSet) {
  return std::array{EnumName{FrameSet::kAll, "all"}, EnumName{FrameSet::kCurrent, "current"}};
}
enum class VideoDtype { kFloat32, kUint8 };
constexpr auto enum_names(VideoDtype) {
  return std::array{EnumName{VideoDtype::kFloat32, "float32"},
                    EnumName{VideoDtype::kUint8, "uint8"}};
}

struct AugmentParams {
  FrameSet frames = FrameSet::kAll;
  image_ops::Canvas canvas = image_ops::Canvas::kVertical;
  std::vector<int64_t> camera_size = {192, 256};
  image_ops::ResizeMode resize = image_ops::ResizeMode::kStretch;
  int64_t resize_fill = 0;
  bool deterministic = false;
  VideoDtype video_dtype = VideoDtype::kFloat32;

  std::vector<int64_t> camera_jitter_cameras;
  double camera_jitter_prob = 0.0;
  std::vector<double> camera_jitter_scale = {1.0, 1.0};
  double camera_jitter_translate = 0.0;
  double camera_jitter_rotation = 0.0;
  bool camera_jitter_random_crop = false;

  double color_jitter_brightness = 0.0;
  double color_jitter_contrast = 0.0;
  double color_jitter_saturation = 0.0;
  double color_jitter_gamma = 0.0;

  double domain_jitter_rgb_prob = 0.0;
  std::vector<double> domain_jitter_rgb_gain = {0.8, 1.2};
  double domain_jitter_shadow_prob = 0.0;
  std::vector<double> domain_jitter_shadow_depth = {0.15, 0.35};
  std::vector<double> domain_jitter_shadow_sigma = {0.25, 0.6};

  std::vector<int64_t> sensor_noise_cameras;
  double sensor_noise_gaussian_prob = 0.0;
  double sensor_noise_gaussian_std = 0.02;
  double sensor_noise_blur_prob = 0.0;
  int64_t sensor_noise_blur_kernel_size = 3;
  double sensor_noise_downsample_prob = 0.0;
  double sensor_noise_downsample_scale_min = 0.75;

  bool sync_vlm_color_jitter = true;
  bool sync_vlm_camera_jitter = true;
  std::string augment_if;
  std::string device = "frames";
  bool planes_from_decode = false;

  template <class V>
  void visit(V& v) {
    v("frames", frames,
      "What `frames` holds: all = [anchor, recent, window...] (writes the video canvas), "
      "current = the current frame only (writes only vlm_current_images).");
    v("canvas", canvas,
      "Camera layout on the 384x256 canvas: vertical = cameras stacked in equal rows; robotwin = "
      "camera 0 at 256x256 on top, cameras 1 and 2 at 128x128 side by side below.");
    v("camera_size", camera_size, "Per-camera resize [H, W] before jitter and composition.",
      Min{1});
    v("resize", resize,
      "How a camera's frame is resized to camera_size and then to its canvas slot: stretch = "
      "each axis on its own (the reference's Resize; a 640x480 camera in the one-camera slot, "
      "256 wide and 384 high, is squeezed), fit = keep the aspect ratio and letterbox (bars of "
      "resize_fill), fill = keep the aspect ratio and cut the centre (centre crop, then "
      "scale). `dataset inspect` and `validate --data` show each camera's mapping.");
    v("resize_fill", resize_fill,
      "Level 0-255 of the bars that resize \"fit\" leaves (0: black, i.e. -1 after "
      "normalisation).",
      Min{0}, Max{255});
    v("deterministic", deterministic,
      "Turn every random transform off, whatever the jitter params say (latent caches need it).");
    v("video_dtype", video_dtype,
      "float32: `video` in [-1, 1]; uint8: the same values as uint8 levels round((x + 1) * 127.5) "
      "(a quarter of the bytes), quantised here per sample; HostToDevice turns them back into "
      "float [-1, 1]. The memory frames stay float32.");

    v("camera_jitter_cameras", camera_jitter_cameras, "Camera indices that get camera jitter.",
      Min{0});
    v("camera_jitter_prob", camera_jitter_prob, "Chance a selected camera is jittered.", Min{0.0},
      Max{1.0}, RandomUnless{0.0});
    v("camera_jitter_scale", camera_jitter_scale,
      "[min, max] fraction of the field of view kept (zoom in by up to 1/min).", Min{0.01},
      Max{1.0});
    v("camera_jitter_translate", camera_jitter_translate,
      "Largest shift, as a fraction of the camera's width and height.", Min{0.0}, Max{0.5});
    v("camera_jitter_rotation", camera_jitter_rotation, "Largest rotation in degrees.", Min{0.0},
      Max{180.0});
    v("camera_jitter_random_crop", camera_jitter_random_crop,
      "Place the kept field of view anywhere in the frame instead of at its centre.");

    v("color_jitter_brightness", color_jitter_brightness,
      "Brightness factor drawn from [1 - b, 1 + b] (0: off).", Min{0.0}, RandomUnless{0.0});
    v("color_jitter_contrast", color_jitter_contrast,
      "Contrast factor drawn from [1 - c, 1 + c] (0: off).", Min{0.0}, RandomUnless{0.0});
    v("color_jitter_saturation", color_jitter_saturation,
      "Saturation factor drawn from [1 - s, 1 + s] (0: off).", Min{0.0}, RandomUnless{0.0});
    v("color_jitter_gamma", color_jitter_gamma, "Gamma drawn from [1 - g, 1 + g] (0: off).",
      Min{0.0}, Max{0.99}, RandomUnless{0.0});

    v("domain_jitter_rgb_prob", domain_jitter_rgb_prob, "Chance of a per-channel RGB gain.",
      Min{0.0}, Max{1.0}, RandomUnless{0.0});
    v("domain_jitter_rgb_gain", domain_jitter_rgb_gain, "[min, max] gain of each channel.",
      Min{0.0});
    v("domain_jitter_shadow_prob", domain_jitter_shadow_prob, "Chance of a soft shadow.", Min{0.0},
      Max{1.0}, RandomUnless{0.0});
    v("domain_jitter_shadow_depth", domain_jitter_shadow_depth,
      "[min, max] darkening at the shadow's centre.", Min{0.0}, Max{1.0});
    v("domain_jitter_shadow_sigma", domain_jitter_shadow_sigma,
      "[min, max] shadow radius (Gaussian sigma) as a fraction of the canvas.", Min{0.01});

    v("sensor_noise_cameras", sensor_noise_cameras, "Camera indices that get sensor noise.",
      Min{0});
    v("sensor_noise_gaussian_prob", sensor_noise_gaussian_prob, "Chance of Gaussian pixel noise.",
      Min{0.0}, Max{1.0}, RandomUnless{0.0});
    v("sensor_noise_gaussian_std", sensor_noise_gaussian_std,
      "Standard deviation of the pixel noise (pixel values in [0, 1]).", Min{0.0});
    v("sensor_noise_blur_prob", sensor_noise_blur_prob, "Chance of a Gaussian blur.", Min{0.0},
      Max{1.0}, RandomUnless{0.0});
    v("sensor_noise_blur_kernel_size", sensor_noise_blur_kernel_size,
      "Blur kernel size (odd); sigma is drawn from [0.1, 2].", Min{1});
    v("sensor_noise_downsample_prob", sensor_noise_downsample_prob,
      "Chance of a down- and up-sampling round trip.", Min{0.0}, Max{1.0}, RandomUnless{0.0});
    v("sensor_noise_downsample_scale_min", sensor_noise_downsample_scale_min,
      "Smallest down-sampling scale; the scale is drawn from [min, 1].", Min{0.05}, Max{1.0});

    v("sync_vlm_color_jitter", sync_vlm_color_jitter,
      "Give the VLM's current images the sample's colour jitter (brightness, contrast, "
      "saturation, gamma; contrast against each image's own mean), as the reference's "
      "sync_vlm_color_jitter / apply_to_vlm.");
    v("sync_vlm_camera_jitter", sync_vlm_camera_jitter,
      "Give each camera's VLM current image that camera's camera jitter (the same motion at the "
      "raw size), as the reference's sync_vlm_camera_jitter / apply_to_vlm.");
    v("augment_if", augment_if,
      "Bool field: augment only samples where it is true, pass the others through unchanged "
      "(\"\": every sample).");
    v("device", device,
      "frames: augment where the frames are (host frames with the host's uint8 kernels, "
      "VideoDecode's frames in GPU memory as ATen ops on that GPU); cuda: on the training GPU "
      "(cuda:LOCAL_RANK), host frames uploaded as uint8 first. Either way the images agree "
      "within a level a pixel; the outputs stay where they were made (HostToDevice passes GPU "
      "tensors through).",
      OneOf{"frames", "cuda"});
    v("planes_from_decode", planes_from_decode,
      "Take each camera's frames for the canvas from frame_planes (VideoDecode's planes_size, "
      "which must be camera_size: straight from the decoder at half size where the frames are "
      "twice it, within a level a pixel of halving here on average, on a quarter of the "
      "decoder's conversion) and the VLM's current frame from frames, which then holds only it; "
      "a sample whose frames are in GPU memory (VideoDecode's cpu_first decoder spilled it to "
      "NVDEC) holds every frame there and is augmented there. Needs frames all, device frames, "
      "and resize stretch unless the frames are twice camera_size.");
  }

  // What the params alone can tell; the camera count of the samples is checked as they come.
  void check(ParamChecker& c) const;
};

// The stage API of a node that renders cameras onto the canvas with Augment's params (Augment, and
// LatentCacheLookup, whose cache holds what Augment rendered): `validate
// --data` finds such nodes by this interface and shows how each camera maps onto its slot.
class CanvasRenderer {
 public:
  virtual ~CanvasRenderer() = default;
  // Null when the node renders no canvas (Augment with `frames: current`).
  virtual const AugmentParams* canvas_params() const = 0;
  // Where those params are within the node's params: "" or "/augment".
  virtual std::string canvas_params_pointer() const = 0;
};

// The first param of `params` (AugmentParams, or a struct extending it) that makes the images
// random with its current value, or "" when the images are deterministic: `deterministic` turns
// every random transform off.
template <class P>
std::string first_random_augment_param(const P& params) {
  return params.deterministic ? std::string() : first_random_param(params);
}

}  // namespace wam::stages
