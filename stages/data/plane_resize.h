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

// A source_width x source_height -> target_width x target_height resize with its filters and the
// kernel's tables, made once and used for every plane of those sizes. Not thread-safe (it keeps
// its rows of horizontal sums): one per thread.
class PlaneResizer {
 public:
  // Null where the kernel does not apply: a CPU without AVX-512 VBMI, or a shrink of more than
  // about 3.5x along an axis (more than 8 taps; libswscale then takes it, with the same output).
  static std::unique_ptr<PlaneResizer> make(int source_width, int source_height, int target_width,
                                            int target_height);

  // `source` rows `source_row` bytes apart (read only within their width), `target` rows
  // `target_row` bytes apart (written only within their width).
  void resize(const uint8_t* source, int64_t source_row, uint8_t* target, int64_t target_row);

 private:
  PlaneResizer() = default;

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

}  // namespace wam::plane_resize
