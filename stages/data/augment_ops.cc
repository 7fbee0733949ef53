#include "data/augment_ops.h"

#include <ATen/CPUGeneratorImpl.h>

#include <string>
#include <vector>

#if WAM_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
#if WAM_FUSED_KERNELS
#include "kernels/canvas_colour.h"
#include "kernels/frames_resize.h"
#include "kernels/planes_warp.h"
#endif

#include "common/capture_gate.h"
#include "wam/error.h"
#include "wam/tensor.h"

namespace wam::stages {
namespace {

using image_ops::kCanvasHeight;
using image_ops::kCanvasWidth;

uint8_t fill_level(const AugmentParams& params) { return static_cast<uint8_t>(params.resize_fill); }
bool all_frames(const AugmentParams& params) { return params.frames == FrameSet::kAll; }
bool video_as_levels(const AugmentParams& params) {
  return params.video_dtype == VideoDtype::kUint8;
}
int64_t current_frame(const AugmentParams& params) { return all_frames(params) ? kWindowStart : 0; }

// The Gaussian noise's generator for one sample, on the images' device.
at::Generator noise_generator(uint64_t seed, const at::Device& device) {
  if (device.is_cpu()) return at::make_generator<at::CPUGeneratorImpl>(seed);
#if WAM_WITH_CUDA
  if (device.is_cuda()) {
    at::Generator generator = at::make_generator<at::CUDAGeneratorImpl>(device.index());
    generator.set_current_seed(seed);
    return generator;
  }
#endif
  throw Error("Augment: no random generator for images on " + device.str());
}

// The sensor noise of one camera's region of the float canvas (either path: the host path's
// canvas is float by then too); returns `region` itself when nothing applies.
at::Tensor add_sensor_noise(const at::Tensor& region, const SensorNoise& noise,
                            const AugmentParams& params) {
  at::Tensor out = region;
  if (noise.downsample_scale) out = image_ops::downsample_upsample(out, *noise.downsample_scale);
  if (noise.blur_sigma) {
    out = image_ops::gaussian_blur(out, params.sensor_noise_blur_kernel_size, *noise.blur_sigma);
  }
  if (noise.gaussian_seed) {
    at::Generator generator = noise_generator(*noise.gaussian_seed, region.device());
    out = image_ops::add_gaussian_noise(out, params.sensor_noise_gaussian_std, generator);
  }
  return out;
}

// Applies every camera's sensor noise to its slot of `canvas` (float [T, 3, H, W], made by the
// caller).
void add_sensor_noise_(at::Tensor& canvas, const std::vector<image_ops::Rect>& slots,
                       const SampleDraws& draws, const AugmentParams& params) {
  for (size_t camera = 0; camera < slots.size(); ++camera) {
    const image_ops::Rect& slot = slots[camera];
    at::Tensor region = canvas.narrow(2, slot.top, slot.height).narrow(3, slot.left, slot.width);
    const at::Tensor noisy = add_sensor_noise(region, draws.sensor_noise[camera], params);
    if (!noisy.is_same(region)) region.copy_(noisy);
  }
}

// ---- on the host --------------------------------------------------------------------------------

// The VLM's images from frame `current` of each camera of `frames`.
at::Tensor host_vlm_images(const at::Tensor& frames, int64_t current, const AugmentParams& params,
                           const SampleDraws* draws) {
  std::vector<at::Tensor> images;
  for (int64_t camera = 0; camera < frames.size(0); ++camera) {
    at::Tensor image = image_ops::to_planes(frames.select(0, camera).narrow(0, current, 1));
    if (draws && params.sync_vlm_camera_jitter) {
      if (const auto& warp = draws->camera_warps[static_cast<size_t>(camera)]) {
        image = image_ops::warp_planes(image, *warp);
      }
    }
    images.push_back(std::move(image));
  }
  at::Tensor out = at::cat(images);
  if (draws && params.sync_vlm_color_jitter && !draws->color.is_identity()) {
    out = image_ops::jittered_levels(out, draws->color);
  }
  return out;
}

// Each camera's frames of `frames` as uint8 planes [T, 3, camera_size].
std::vector<at::Tensor> camera_planes(const at::Tensor& frames, const AugmentParams& params) {
  std::vector<at::Tensor> images;
  for (int64_t camera = 0; camera < frames.size(0); ++camera) {
    images.push_back(image_ops::frames_to_planes_as(frames.select(0, camera), params.camera_size[0],
                                                    params.camera_size[1], params.resize,
                                                    fill_level(params)));
  }
  return images;
}

bool has_sensor_noise(const SampleDraws& draws) {
  for (const SensorNoise& noise : draws.sensor_noise) {
    if (noise.downsample_scale || noise.blur_sigma || noise.gaussian_seed) return true;
  }
  return false;
}

// The outputs of `frames: all`, from the unit canvas of a sample's `time` frames: each its own
// compact tensor, written straight from the canvas by `to_video` (views of it would keep all of it
// alive downstream).
using ToVideo = at::Tensor (*)(const at::Tensor& canvas, int64_t first, int64_t count,
                               bool as_levels);
AugmentedImages with_canvas(at::Tensor vlm_images, const at::Tensor& canvas, int64_t time,
                            const AugmentParams& params, ToVideo to_video) {
  AugmentedImages out;
  out.vlm_current_images = std::move(vlm_images);
  out.video = to_video(canvas, kWindowStart, time - kWindowStart, video_as_levels(params));
  out.memory_video_anchor = to_video(canvas, kAnchorIndex, 1, false);
  out.memory_video_recent = to_video(canvas, kRecentIndex, 1, false);
  return out;
}

// Each camera's planes at camera_size (`time` frames) -> the canvas [T, 3, 384, 256] in levels,
// then through the colour jitter to the outputs. Without sensor noise the videos come straight
// from the jitter as [-1, 1] floats or uint8 levels (jittered_videos); otherwise through the
// float canvas in [0, 1], which the sensor noise changes in place, to with_canvas.
AugmentedImages host_outputs(at::Tensor vlm_images, std::vector<at::Tensor> images,
                             const AugmentParams& params, const SampleDraws* draws, int64_t time) {
  const auto cameras = static_cast<int64_t>(images.size());
  const auto slots = image_ops::canvas_layout(params.canvas, cameras, kCanvasHeight, kCanvasWidth);
  for (int64_t camera = 0; camera < cameras; ++camera) {
    if (draws && draws->camera_warps[static_cast<size_t>(camera)]) {
      at::Tensor& image = images[static_cast<size_t>(camera)];
      image = image_ops::warp_planes(image, *draws->camera_warps[static_cast<size_t>(camera)]);
    }
  }
  image_ops::ColourJitter jitter;
  if (draws) jitter = {draws->color, draws->rgb_gain, draws->shadow};
  const at::Tensor levels = image_ops::compose_canvas(images, slots, kCanvasHeight, kCanvasWidth,
                                                      params.resize, fill_level(params));
  if (draws && has_sensor_noise(*draws)) {
    at::Tensor canvas = image_ops::jittered_unit_float(levels, jitter);
    add_sensor_noise_(canvas, slots, *draws, params);
    return with_canvas(std::move(vlm_images), canvas, time, params,
                       image_ops::unit_frames_to_video);
  }
  std::vector<at::Tensor> videos =
      image_ops::jittered_videos(levels, jitter,
                                 {{kWindowStart, time - kWindowStart, video_as_levels(params)},
                                  {kAnchorIndex, 1},
                                  {kRecentIndex, 1}});
  AugmentedImages out;
  out.vlm_current_images = std::move(vlm_images);
  out.video = std::move(videos[0]);
  out.memory_video_anchor = std::move(videos[1]);
  out.memory_video_recent = std::move(videos[2]);
  return out;
}

// ---- as ATen ops on the frames' device ----------------------------------------------------------

// uint8 [N, H, W, 3] -> float [N, 3, H, W] in [0, 1], a new contiguous tensor.
at::Tensor unit_planes(const at::Tensor& frames_nhwc) {
  const int64_t n = frames_nhwc.size(0), h = frames_nhwc.size(1), w = frames_nhwc.size(2);
  return at::empty({n, 3, h, w}, frames_nhwc.options().dtype(at::kFloat))
      .copy_(frames_nhwc.permute({0, 3, 1, 2}))
      .div_(255.0);
}

// image_ops::resize_planes_as() in float: the same placement, the float resize it is tested
// against, bars of the fill level. Returns `images` itself when the size already matches.
at::Tensor resize_as(const at::Tensor& images, int64_t height, int64_t width,
                     image_ops::ResizeMode mode, uint8_t fill) {
  const int64_t h = images.size(2), w = images.size(3);
  if (h == height && w == width) return images;
  const image_ops::Placement p = image_ops::place(mode, h, w, height, width);
  const at::Tensor kept =
      images.narrow(2, p.source.top, p.source.height).narrow(3, p.source.left, p.source.width);
  if (p.target.height == height && p.target.width == width) {
    return image_ops::resize(kept, height, width);
  }
  at::Tensor out =
      at::full({images.size(0), images.size(1), height, width}, fill / 255.0, images.options());
  out.narrow(2, p.target.top, p.target.height)
      .narrow(3, p.target.left, p.target.width)
      .copy_(image_ops::resize(kept, p.target.height, p.target.width));
  return out;
}

at::Tensor tensor_vlm_images(const at::Tensor& frames, const AugmentParams& params,
                             const SampleDraws* draws) {
  const at::Tensor current = frames.select(1, current_frame(params));  // [V, H, W, 3]
  at::Tensor images =
      at::empty({current.size(0), 3, current.size(1), current.size(2)}, current.options())
          .copy_(current.permute({0, 3, 1, 2}));
  if (draws && params.sync_vlm_camera_jitter) {
    for (int64_t camera = 0; camera < current.size(0); ++camera) {
      if (const auto& warp = draws->camera_warps[static_cast<size_t>(camera)]) {
        // Rounded to levels here as the host path's uint8 warp rounds.
        at::Tensor warped = image_ops::warp_float(unit_planes(current.narrow(0, camera, 1)), *warp);
        images.narrow(0, camera, 1).copy_(image_ops::to_uint8_(warped));
      }
    }
  }
  if (draws && params.sync_vlm_color_jitter && !draws->color.is_identity()) {
    at::Tensor unit = images.to(at::kFloat).div_(255.0);
    image_ops::adjust_color_(unit, draws->color);
    images = image_ops::to_uint8_(unit);
  }
  return images;
}

// One camera's frames (uint8 [T, H, W, 3]) as unit float planes [T, 3, camera_size]: resize_as of
// unit_planes, or, for contiguous frames on a GPU with the fused kernels (and a shrink the kernel
// takes), kernels/frames_resize.cu in one pass from the uint8 frames.
at::Tensor camera_unit_planes(const at::Tensor& frames, const AugmentParams& params) {
  const int64_t height = params.camera_size[0], width = params.camera_size[1];
#if WAM_FUSED_KERNELS
  const int64_t count = frames.size(0), h = frames.size(1), w = frames.size(2);
  const image_ops::Placement p = image_ops::place(params.resize, h, w, height, width);
  const kernels::ImageWindow source{
      h, w, p.source.top, p.source.left, p.source.height, p.source.width};
  const kernels::ImageWindow target{height,        width,           p.target.top,
                                    p.target.left, p.target.height, p.target.width};
  if (frames.is_cuda() && frames.is_contiguous() &&
      kernels::resize_frames_supports(source, target)) {
    const at::TensorOptions options = frames.options().dtype(at::kFloat);
    at::Tensor planes =
        p.target.height == height && p.target.width == width
            ? at::empty({count, 3, height, width}, options)
            : at::full({count, 3, height, width}, fill_level(params) / 255.0, options);
    kernels::resize_frames_to_unit_planes(
        frames.data_ptr<uint8_t>(), source, planes.data_ptr<float>(), target, count,
        c10::cuda::getCurrentCUDAStream(frames.device().index()).stream());
    return planes;
  }
#endif
  return resize_as(unit_planes(frames), height, width, params.resize, fill_level(params));
}

#if WAM_FUSED_KERNELS
// A camera whose slot is its camera_size, on a GPU: its frames resized straight into the slot
// (kernels/frames_resize.cu's target window), or resized, then warped into it
// (kernels/planes_warp.cu), without the warped copy and the slot's copy. False where the kernels
// do not apply (a slot of another size, bars to fill, a shrink the resize does not take).
bool fused_into_slot(at::Tensor& canvas, const at::Tensor& frames, const image_ops::Rect& slot,
                     const image_ops::CameraWarp* warp, const AugmentParams& params) {
  const int64_t height = params.camera_size[0], width = params.camera_size[1];
  if (!frames.is_cuda() || !frames.is_contiguous() || slot.height != height ||
      slot.width != width) {
    return false;
  }
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(frames.device().index()).stream();
  if (warp) {
    const at::Tensor image = camera_unit_planes(frames, params);
    const auto theta =
        image_ops::warp_theta(*warp, static_cast<double>(height), static_cast<double>(width));
    const float map[6] = {static_cast<float>(theta[0]), static_cast<float>(theta[1]),
                          static_cast<float>(theta[2]), static_cast<float>(theta[3]),
                          static_cast<float>(theta[4]), static_cast<float>(theta[5])};
    kernels::warp_planes_into(image.data_ptr<float>(), image.size(0), height, width, map,
                              canvas.data_ptr<float>(), kCanvasHeight, kCanvasWidth, slot.top,
                              slot.left, stream);
    return true;
  }
  const int64_t h = frames.size(1), w = frames.size(2);
  const image_ops::Placement p = image_ops::place(params.resize, h, w, height, width);
  if (p.target.height != height || p.target.width != width) return false;
  const kernels::ImageWindow source{
      h, w, p.source.top, p.source.left, p.source.height, p.source.width};
  const kernels::ImageWindow target{kCanvasHeight, kCanvasWidth, slot.top,
                                    slot.left,     height,       width};
  if (!kernels::resize_frames_supports(source, target)) return false;
  kernels::resize_frames_to_unit_planes(frames.data_ptr<uint8_t>(), source,
                                        canvas.data_ptr<float>(), target, frames.size(0), stream);
  return true;
}
#endif

// The unit canvas [T, 3, 384, 256] of the cameras' frames, resized and warped into their slots,
// before the colour jitter.
at::Tensor tensor_geometry(const at::Tensor& frames, const std::vector<image_ops::Rect>& slots,
                           const AugmentParams& params, const SampleDraws* draws) {
  const int64_t cameras = frames.size(0);
  at::Tensor canvas = at::zeros({frames.size(1), 3, kCanvasHeight, kCanvasWidth},
                                frames.options().dtype(at::kFloat));
  for (int64_t camera = 0; camera < cameras; ++camera) {
    const at::Tensor camera_frames = frames.select(0, camera);
    const auto& drawn_warp =
        draws ? draws->camera_warps[static_cast<size_t>(camera)] : std::nullopt;
    const image_ops::CameraWarp* warp = drawn_warp ? &*drawn_warp : nullptr;
    const image_ops::Rect& slot = slots[static_cast<size_t>(camera)];
#if WAM_FUSED_KERNELS
    if (fused_into_slot(canvas, camera_frames, slot, warp, params)) continue;
#endif
    at::Tensor image = camera_unit_planes(camera_frames, params);
    if (warp) image = image_ops::warp_float(image, *warp);
    canvas.narrow(2, slot.top, slot.height)
        .narrow(3, slot.left, slot.width)
        .copy_(resize_as(image, slot.height, slot.width, params.resize, fill_level(params)));
  }
  return canvas;
}

// The colour jitter and the sensor noise on the canvas, in place.
void jitter_canvas_(at::Tensor& canvas, const std::vector<image_ops::Rect>& slots,
                    const SampleDraws& draws, const AugmentParams& params) {
  image_ops::adjust_color_(canvas, draws.color);
  if (draws.rgb_gain) image_ops::apply_rgb_gain_(canvas, *draws.rgb_gain);
  if (draws.shadow) image_ops::apply_shadow_(canvas, *draws.shadow);
  add_sensor_noise_(canvas, slots, draws, params);
}

// image_ops::unit_frames_to_video() as ATen ops: frames [first, first + count) of the unit canvas
// -> a new compact [3, count, H, W] in [-1, 1], or its levels.
at::Tensor tensor_video(const at::Tensor& canvas, int64_t first, int64_t count, bool as_levels) {
  at::Tensor video = at::empty({3, count, canvas.size(2), canvas.size(3)}, canvas.options())
                         .copy_(canvas.narrow(0, first, count).permute({1, 0, 2, 3}))
                         .mul_(2.0)
                         .sub_(1.0);
  return as_levels ? image_ops::signed_unit_to_levels(video) : video;
}

#if WAM_FUSED_KERNELS
// The jitter of `draws` as kernels/canvas_colour.cu takes it: every double rounded to float as
// ATen rounds a scalar for a float tensor (image_ops.cc's adjust_color_, apply_rgb_gain_,
// apply_shadow_).
kernels::CanvasColour canvas_colour(const SampleDraws* draws) {
  kernels::CanvasColour colour;
  if (!draws) return colour;
  const image_ops::ColorAdjustment& c = draws->color;
  colour.brightness = c.brightness != 1.0 ? static_cast<float>(c.brightness) : 1.0f;
  if (c.contrast != 1.0) {
    colour.contrast = static_cast<float>(c.contrast);
    colour.contrast_rest = static_cast<float>(1.0 - c.contrast);
  }
  if (c.saturation != 1.0) {
    colour.saturation = static_cast<float>(c.saturation);
    colour.saturation_rest = static_cast<float>(1.0 - c.saturation);
  }
  colour.gamma = c.gamma != 1.0 ? static_cast<float>(c.gamma) : 1.0f;
  if (draws->rgb_gain) {
    colour.has_rgb_gain = true;
    for (int k = 0; k < 3; ++k) colour.rgb_gain[k] = static_cast<float>((*draws->rgb_gain)[k]);
  }
  if (draws->shadow) {
    const image_ops::Shadow& shadow = *draws->shadow;
    colour.has_shadow = true;
    colour.shadow_centre_y = static_cast<float>(shadow.center_y);
    colour.shadow_centre_x = static_cast<float>(shadow.center_x);
    colour.shadow_depth = static_cast<float>(shadow.depth);
    colour.shadow_two_sigma_squared = static_cast<float>(2.0 * shadow.sigma * shadow.sigma);
  }
  return colour;
}

// with_canvas's outputs from the canvas before its colour jitter, jittered and scaled by
// kernels/canvas_colour.cu in one pass for each output (on the current stream) instead of about
// twenty ATen passes over the canvas.
AugmentedImages fused_outputs(at::Tensor vlm_images, const at::Tensor& canvas, int64_t time,
                              const AugmentParams& params, const SampleDraws* draws) {
  const kernels::Canvas pixels{canvas.data_ptr<float>(), canvas.size(0), canvas.size(2),
                               canvas.size(3)};
  const kernels::CanvasColour colour = canvas_colour(draws);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(canvas.device().index()).stream();
  at::Tensor partials;
  if (colour.contrast != 1.0f) {
    partials = at::empty({canvas.size(0), kernels::kCanvasGreyChunks}, canvas.options());
    kernels::canvas_grey_partials(pixels, colour.brightness, partials.data_ptr<float>(), stream);
  }
  const auto video = [&](int64_t first, int64_t count, bool as_levels) {
    at::Tensor out = at::empty({3, count, canvas.size(2), canvas.size(3)},
                               canvas.options().dtype(as_levels ? at::kByte : at::kFloat));
    kernels::canvas_to_video(pixels, colour,
                             partials.defined() ? partials.data_ptr<float>() : nullptr, first,
                             count, as_levels, out.data_ptr(), stream);
    return out;
  };
  AugmentedImages out;
  out.vlm_current_images = std::move(vlm_images);
  out.video = video(kWindowStart, time - kWindowStart, video_as_levels(params));
  out.memory_video_anchor = video(kAnchorIndex, 1, false);
  out.memory_video_recent = video(kRecentIndex, 1, false);
  return out;
}
#endif

// The output of `frames: current`: the VLM's images alone.
AugmentedImages vlm_images_only(at::Tensor vlm_images) {
  AugmentedImages out;
  out.vlm_current_images = std::move(vlm_images);
  return out;
}

}  // namespace

AugmentedImages augment_on_host(const at::Tensor& frames, const AugmentParams& params,
                                const SampleDraws* draws) {
  at::Tensor vlm_images = host_vlm_images(frames, current_frame(params), params, draws);
  if (!all_frames(params)) return vlm_images_only(std::move(vlm_images));
  return host_outputs(std::move(vlm_images), camera_planes(frames, params), params, draws,
                      frames.size(1));
}

AugmentedImages augment_planes_from_decode(const at::Tensor& current_frames,
                                           const at::Tensor& planes, const AugmentParams& params,
                                           const SampleDraws* draws) {
  at::Tensor vlm_images = host_vlm_images(current_frames, 0, params, draws);
  std::vector<at::Tensor> images;
  for (int64_t camera = 0; camera < planes.size(0); ++camera) {
    images.push_back(planes.select(0, camera));
  }
  return host_outputs(std::move(vlm_images), std::move(images), params, draws, planes.size(1));
}

AugmentedImages augment_with_tensor_ops(const at::Tensor& frames, const AugmentParams& params,
                                        const SampleDraws* draws) {
  at::Tensor vlm_images = tensor_vlm_images(frames, params, draws);
  if (!all_frames(params)) return vlm_images_only(std::move(vlm_images));
  const auto slots =
      image_ops::canvas_layout(params.canvas, frames.size(0), kCanvasHeight, kCanvasWidth);
  at::Tensor canvas = tensor_geometry(frames, slots, params, draws);
#if WAM_FUSED_KERNELS
  // The sensor noise sits between the jitter and the video's scaling, on some cameras' regions:
  // a sample that drew it keeps the ATen passes.
  if (canvas.is_cuda() && !(draws && has_sensor_noise(*draws))) {
    return fused_outputs(std::move(vlm_images), canvas, frames.size(1), params, draws);
  }
#endif
  if (draws) jitter_canvas_(canvas, slots, *draws, params);
  return with_canvas(std::move(vlm_images), canvas, frames.size(1), params, tensor_video);
}

AugmentedImages augment_on_gpu(const at::Tensor& frames, const at::Device& device,
                               const AugmentParams& params, const SampleDraws* draws) {
#if WAM_WITH_CUDA
  // GPU work beside the step's graph capture (common/capture_gate.h).
  const auto gpu_work = capture_gate().gpu_work();
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(
      /*isHighPriority=*/false, device.index());
  AugmentedImages out;
  {
    const c10::cuda::CUDAStreamGuard guard(stream);
    // VideoDecode's device frames are whole when they arrive (video_reader.h).
    out = augment_with_tensor_ops(frames.is_cuda() ? frames : frames.to(device), params, draws);
  }
  // Made on this stream, used on the default one: the caching allocator must not hand their
  // memory to this stream again while the default stream's work on them is pending.
  const c10::cuda::CUDAStream consumer = c10::cuda::getDefaultCUDAStream(device.index());
  for (at::Tensor* output :
       {&out.vlm_current_images, &out.video, &out.memory_video_anchor, &out.memory_video_recent}) {
    if (output->defined()) output->record_stream(consumer);
  }
  // Sleeping, not spinning, while the GPU works: the data path's threads share the host's cores.
  at::cuda::CUDAEvent done(cudaEventBlockingSync | cudaEventDisableTiming);
  done.record(stream);
  done.synchronize();
  return out;
#else
  throw Error("Augment: frames on " + device.str() + " need a build with CUDA");
#endif
}

}  // namespace wam::stages
