// libswscale's bilinear resize of one 8-bit plane (SWS_BILINEAR | SWS_ACCURATE_RND | SWS_BITEXACT,
// GRAY8 to GRAY8: image_ops' resize_planes), bit for bit, in about a third of its time on a CPU
// with AVX-512 VBMI: Augment's canvas slots (RoboTwin's 240x320 cameras to 256x256 and 128x128)
// were a tenth of a sample's CPU time through libswscale (docs/BENCHMARKS.md, issue 24).
// libswscale exposes neither its filters nor a faster path for them, so both are written here:
// the filters by libswscale's integer arithmetic, the kernel with byte permutes (augment_test
// checks both against libswscale on the configs' sizes and on random ones).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace wam::plane_resize {

// One axis of the resize: output i is sum_j weights[i * taps + j] * source[first[i] + j] / one,
// with `one` 1 << 14 horizontally and 1 << 12 vertically; `taps` is libswscale's, padded with
// zero weights to a multiple of `align` (its x86 and Arm kernels' 4 horizontally, 2 vertically).
struct AxisFilter {
  int taps = 0;
  std::vector<int32_t> first;
  std::vector<int16_t> weights;
};
AxisFilter bilinear_filter(int source_size, int target_size, int one, int align);

// `filter` (over `source_size` pixels, even) for a plane of half that size whose samples each
// stand for two neighbouring pixels, as 4:2:0 chroma does in libswscale's RGB conversion (each
// chroma sample repeated over its 2x2 pixels): each output's weights on a pair summed (their sum,
// `one`, unchanged), padded with zero weights to a multiple of `align` taps, kept inside the plane.
AxisFilter over_pairs(const AxisFilter& filter, int source_size, int align);

// The two passes in plain integer arithmetic, what PlaneResizer's kernel computes bit for bit:
// each needed source row's horizontal sums (sum of weights x bytes) >> 7, then each output
// (sum of weights x sums + round) >> shift; shift 19 (round 2^18) gives levels, 13 (round 2^12)
// 64 times the levels, not yet rounded to them. `target` rows `target_row` values apart.
template <typename Out>
void resize_plainly(const uint8_t* source, int64_t source_row, const AxisFilter& horizontal,
                    const AxisFilter& vertical, int shift, Out* target, int64_t target_row);

// A source_width x source_height -> target_width x target_height resize with its filters and the
// kernel's tables, made once and used for every plane of those sizes. Not thread-safe (it keeps
// its rows of horizontal sums): one per thread.
class PlaneResizer {
 public:
  // Null where the kernel does not apply: a CPU without AVX-512 VBMI, or a shrink of more than
  // about 3.5x along an axis (more than 8 taps; libswscale then takes it, with the same output).
  static std::unique_ptr<PlaneResizer> make(int source_width, int source_height, int target_width,
                                            int target_height);
  // The same with the given filters (`one` 1 << 14 horizontally and 1 << 12 vertically, taps a
  // multiple of 4 horizontally and of 2, or 1, vertically); null where the kernel cannot take them.
  static std::unique_ptr<PlaneResizer> make(int source_width, int source_height,
                                            const AxisFilter& horizontal, AxisFilter vertical);

  // `source` rows `source_row` bytes apart (read only within their width), `target` rows
  // `target_row` bytes apart (written only within their width).
  void resize(const uint8_t* source, int64_t source_row, uint8_t* target, int64_t target_row);
  // The outputs at 64 times their levels, not rounded to them (resize_plainly's shift 13).
  void resize_levels64(const uint8_t* source, int64_t source_row, uint16_t* target,
                       int64_t target_row);

 private:
  PlaneResizer() = default;
  void horizontal_pass(const uint8_t* source, int64_t source_row);

  int source_width_ = 0, target_width_ = 0, target_height_ = 0;
  int horizontal_pairs_ = 0;          // the horizontal taps, two per 32-bit lane
  int blocks_ = 0;                    // of 32 outputs along a row
  std::vector<int32_t> block_start_;  // each block's first source column
  std::vector<uint8_t> indices_;      // per block: its bytes' places in the 128 read at the start
  std::vector<int16_t> weights_;      // per block: the weights beside them
  AxisFilter vertical_;
  int64_t sums_row_ = 0;       // int16 values a row of horizontal sums, a multiple of 64
  std::vector<int16_t> sums_;  // every source row's horizontal sums
};

// A YUV 4:2:0 frame resized to RGB planes of another size, converting only the output's pixels:
// the luma by the bilinear filters PlaneResizer takes for an RGB plane, each chroma plane by those
// filters over pixel pairs (over_pairs), all three kept at 64 times their levels, then
// pixel_kernels' rgb_from_yuv64. Libswscale's RGB24 of the full frame then each plane resized is
// the same but for where a colour clips and the roundings (docs/BENCHMARKS.md, "LIBERO's frames
// resized before their colour conversion"). The same bits on every CPU: PlaneResizer's kernel
// where it applies, else resize_plainly. Not thread-safe: one per thread.
class Yuv420Resizer {
 public:
  // Null for a frame with an odd width or height, or smaller than 8x8.
  static std::unique_ptr<Yuv420Resizer> make(int width, int height, int target_width,
                                             int target_height);

  // Luma rows `luma_row` bytes apart, chroma rows `chroma_row`; the planes' rows `out_row` apart.
  void resize(const uint8_t* luma, int64_t luma_row, const uint8_t* cb, const uint8_t* cr,
              int64_t chroma_row, bool full_range, uint8_t* red, uint8_t* green, uint8_t* blue,
              int64_t out_row);

 private:
  Yuv420Resizer() = default;
  void resize_plane(int which, const uint8_t* source, int64_t source_row, uint16_t* target);

  int target_width_ = 0, target_height_ = 0;
  AxisFilter horizontal_[2], vertical_[2];    // luma's, chroma's
  std::unique_ptr<PlaneResizer> kernels_[2];  // null where the kernel does not apply
  std::vector<uint16_t> levels_;              // the three planes at 64 times their levels
};

}  // namespace wam::plane_resize
