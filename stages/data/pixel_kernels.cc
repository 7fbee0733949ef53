#include "data/pixel_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// Each entry point is built for x86-64's baseline (SSE2), x86-64-v3 (AVX2, FMA) and x86-64-v4
// (AVX-512 with its byte and word instructions), and the loader picks one per machine (AVX-512
// halves the time of the gamma's log and exp against AVX2; its byte instructions cut the byte-to-
// float loops by a third against plain AVX-512F). The compiler contracts nothing (CMakeLists.txt)
// and no loop reorders a float sum (integer sums are exact in any order). The only fused
// multiply-adds are the gamma's polynomials' explicit fmaf, whose result IEEE 754 fixes: the
// baseline build computes them in software (libm's fmaf), with the same bits, its gamma about 30
// times slower (x86-64 CPUs since 2013, Haswell and every Zen, take one of the other two). So all
// give the same bits (as -O0 and -march builds did, checked once): a sample renders identically on
// every machine of a job.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WAM_PIXEL_KERNEL \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define WAM_PIXEL_KERNEL
#endif
#define WAM_INLINE [[gnu::always_inline]] inline

namespace wam::pixel_kernels {
namespace {

WAM_INLINE float clamp_unit(float x) { return std::min(std::max(x, 0.0f), 1.0f); }

// A unit float's video level: round(((x * 2 - 1) + 1) * 127.5), clamped, as torch's ops on the
// [-1, 1] video round it (image_ops' signed_unit_to_levels).
WAM_INLINE uint8_t unit_level(float unit) {
  const float scaled = ((unit * 2.0f - 1.0f) + 1.0f) * 127.5f;
  const float level = (scaled + 12582912.0f) - 12582912.0f;  // halves to even, as torch's round_
  return static_cast<uint8_t>(std::min(std::max(level, 0.0f), 255.0f));
}

// Natural log for x in (0, 1] (Cephes' logf: about 1 ulp), branch-free so that it vectorises;
// torch's Sleef log is as close. x <= 0 is the caller's case.
WAM_INLINE float log_unit(float x) {
  // x = 2^e (1 + m) with 1 + m in [sqrt(1/2), sqrt(2)), m exact: measured from sqrt(1/2)'s bits,
  // one arithmetic shift gives e and one subtraction 1 + m (the split Cephes makes with a compare
  // and two selects, in 4 fewer vector operations and the same bits).
  const int32_t bits = std::bit_cast<int32_t>(x);
  const int32_t from_root_half = bits - 0x3f3504f3;
  const float e = static_cast<float>(from_root_half >> 23);
  const float m =
      std::bit_cast<float>(bits - (from_root_half & static_cast<int32_t>(0xff800000))) - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = std::fma(y, m, -1.1514610310e-1f);
  y = std::fma(y, m, 1.1676998740e-1f);
  y = std::fma(y, m, -1.2420140846e-1f);
  y = std::fma(y, m, 1.4249322787e-1f);
  y = std::fma(y, m, -1.6668057665e-1f);
  y = std::fma(y, m, 2.0000714765e-1f);
  y = std::fma(y, m, -2.4999993993e-1f);
  y = std::fma(y, m, 3.3333331174e-1f);
  y = y * m * z;
  y = std::fma(-2.12194440e-4f, e, y);
  y = std::fma(-0.5f, z, y);
  return std::fma(0.693359375f, e, m + y);
}

// e^x for x <= 0 (Cephes' expf: about 1 ulp), x below -87 taken as -87; branch-free.
WAM_INLINE float exp_clamped(float x) {
  x = std::max(x, -87.0f);
  // Round to nearest by the float's own rounding: 1.5 * 2^23 pushes the fraction out.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  x = std::fma(n, -0.693359375f, x);
  x = std::fma(n, 2.12194440e-4f, x);
  const float z = x * x;
  float y = 1.9875691500e-4f;
  y = std::fma(y, x, 1.3981999507e-3f);
  y = std::fma(y, x, 8.3334519073e-3f);
  y = std::fma(y, x, 4.1665795894e-2f);
  y = std::fma(y, x, 1.6666665459e-1f);
  y = std::fma(y, x, 5.0000001201e-1f);
  y = std::fma(y, z, x) + 1.0f;
  return y * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// row[x] = row[x]^gamma for values in [0, 1] and gamma > 0 (so the exponent is at most 0); 0 stays
// 0 (as exp(gamma * log 0) = exp(-inf) does). In two loops through `scratch`: in one, the log's and
// the exp's constants did not fit the vector registers together, and it ran 1.7x slower (1.2x
// with the fused multiply-adds; docs/BENCHMARKS.md, issue 24).
WAM_INLINE void power_row(float* __restrict row, float* __restrict scratch, int64_t width,
                          float gamma) {
  for (int64_t x = 0; x < width; ++x) scratch[x] = gamma * log_unit(std::max(row[x], 1e-30f));
  for (int64_t x = 0; x < width; ++x) {
    const float y = exp_clamped(scratch[x]);
    row[x] = row[x] > 0.0f ? std::min(y, 1.0f) : 0.0f;  // e^x > 0: only the top to clamp
  }
}

WAM_INLINE float grey(float r, float g, float b) { return r * 0.299f + g * 0.587f + b * 0.114f; }

// One row of the image (`source` at the row, planes `source_plane` bytes apart) through every
// step, into `rows` ([0, 1] floats). Brightness and contrast act on each channel's level alone, so
// `adjusted` holds their result for each of the 256 levels (the same float operations, once per
// image: a gather from it is cheaper than the division, multiplies and clamps per value).
// Saturation runs in one loop over the pixels, as do RGB gain and shadow: a factor of 1 (and no
// shadow) gives back its input bit for bit, so within a loop no step needs skipping, and one pass
// does the work of a pass per step. Skipped: a loop whose every step is the identity (the
// deterministic configs' canvas, where converting the levels beats gathering them), and gamma at
// 1, which is no identity in floats (exp(log x) rounds).
WAM_INLINE void jitter_row(const uint8_t* source, int64_t source_plane, const ColourJitter& j,
                           const float* adjusted, const float* attenuation, int64_t width,
                           float* rows[3], float* scratch) {
  const uint8_t* __restrict in_r = source;
  const uint8_t* __restrict in_g = source + source_plane;
  const uint8_t* __restrict in_b = source + 2 * source_plane;
  const float* __restrict unit = adjusted;
  float* __restrict r = rows[0];
  float* __restrict g = rows[1];
  float* __restrict b = rows[2];
  const float saturation = j.saturation, saturation_blend = 1.0f - j.saturation;
  if (j.brightness == 1.0f && j.contrast == 1.0f && saturation == 1.0f) {
    for (int64_t x = 0; x < width; ++x) {
      r[x] = static_cast<float>(in_r[x]) / 255.0f;
      g[x] = static_cast<float>(in_g[x]) / 255.0f;
      b[x] = static_cast<float>(in_b[x]) / 255.0f;
    }
  } else {
    for (int64_t x = 0; x < width; ++x) {
      const float red = unit[in_r[x]], green = unit[in_g[x]], blue = unit[in_b[x]];
      const float level = grey(red, green, blue) * saturation_blend;
      r[x] = clamp_unit(red * saturation + level);
      g[x] = clamp_unit(green * saturation + level);
      b[x] = clamp_unit(blue * saturation + level);
    }
  }
  if (j.gamma != 1.0f) {
    for (float* row : {r, g, b}) power_row(row, scratch, width, j.gamma);
  }
  for (int c = 0; c < 3; ++c) {
    float* __restrict row = rows[c];
    const float gain = j.gain[c];
    if (attenuation) {
      for (int64_t x = 0; x < width; ++x) row[x] = clamp_unit(row[x] * gain) * attenuation[x];
    } else if (gain != 1.0f) {
      for (int64_t x = 0; x < width; ++x) row[x] = clamp_unit(row[x] * gain);
    }
  }
}

// The contrast's blend target: the mean ITU-R 601 grey of the brightness-adjusted image. Each
// channel's mean comes from two integer sums, of the levels that brightness leaves below 1 and of
// the count it clamps to 1: they vectorise and are exact in any order, where the float sum of
// per-pixel greys this replaces could not vectorise (reordering a float sum changes its bits) and
// cost a fifth of the kernel. Torch's mean rounds in its own reduction order; both are within
// float rounding of the exact mean.
WAM_INLINE float mean_grey(const uint8_t* source, int64_t source_plane, int64_t source_row,
                           int64_t height, int64_t width, float brightness) {
  int saturating = 256;  // the first level that brightness takes to 1
  while (saturating > 0 &&
         clamp_unit(static_cast<float>(saturating - 1) / 255.0f * brightness) == 1.0f) {
    --saturating;
  }
  double channel_means[3];
  for (int c = 0; c < 3; ++c) {
    uint64_t below = 0, saturated = 0;
    for (int64_t y = 0; y < height; ++y) {
      const uint8_t* __restrict in = source + c * source_plane + y * source_row;
      uint32_t row_below = 0, row_saturated = 0;  // a row of up to 16 M levels fits
      for (int64_t x = 0; x < width; ++x) {
        const uint32_t level = in[x];
        const bool clamped = level >= static_cast<uint32_t>(saturating);
        row_below += clamped ? 0u : level;
        row_saturated += clamped ? 1u : 0u;
      }
      below += row_below;
      saturated += row_saturated;
    }
    channel_means[c] =
        (static_cast<double>(below) * brightness / 255.0 + static_cast<double>(saturated)) /
        static_cast<double>(height * width);
  }
  return static_cast<float>(0.299 * channel_means[0] + 0.587 * channel_means[1] +
                            0.114 * channel_means[2]);
}

template <class Store>
WAM_INLINE void jitter(const uint8_t* source, int64_t source_plane, int64_t source_row,
                       int64_t height, int64_t width, const ColourJitter& j, Store store) {
  std::vector<float> buffer(static_cast<size_t>(4 * width));
  float* rows[3] = {buffer.data(), buffer.data() + width, buffer.data() + 2 * width};
  float* scratch = buffer.data() + 3 * width;
  const float mean = j.contrast != 1.0f
                         ? mean_grey(source, source_plane, source_row, height, width, j.brightness)
                         : 0.0f;
  // Brightness then contrast of each level (jitter_row).
  float adjusted[256];
  const float contrast_add = (1.0f - j.contrast) * mean;
  for (int level = 0; level < 256; ++level) {
    const float bright = clamp_unit(static_cast<float>(level) / 255.0f * j.brightness);
    adjusted[level] = clamp_unit(bright * j.contrast + contrast_add);
  }
  for (int64_t y = 0; y < height; ++y) {
    jitter_row(source + y * source_row, source_plane, j, adjusted,
               j.attenuation ? j.attenuation + y * width : nullptr, width, rows, scratch);
    for (int c = 0; c < 3; ++c) store(c, y, rows[c]);
  }
}

// Halving (halve_plane, halve_rgb): each output pixel is the (1, 3, 3, 1) / 8 filter per axis over
// the 4 x 4 source pixels around it, in integer sums (at most 64 * 255), exact, so the order of the
// vertical and the horizontal pass does not matter.

// One row of vertical sums (at most 8 * 255) of four source rows, `count` values.
WAM_INLINE void vertical_sums(const uint8_t* __restrict above, const uint8_t* __restrict top,
                              const uint8_t* __restrict bottom, const uint8_t* __restrict below,
                              int64_t count, uint16_t* __restrict sums) {
  for (int64_t x = 0; x < count; ++x) {
    sums[x] = static_cast<uint16_t>(above[x] + 3 * (top[x] + bottom[x]) + below[x]);
  }
}

// The horizontal pass over one plane's row of vertical sums `v` (`width` values, with v[-1] and
// v[width] holding the repeated edges) into `width / 2` outputs, each `finish(sum)` of the (1, 3,
// 3, 1) filter's sum (at most 64 * 255). Read as pairs (v[2x], v[2x + 1]) in one 32-bit word, so
// that the loop loads contiguously and vectorises (little-endian: the low half is v[2x]).
template <class Out, class Finish>
WAM_INLINE void halve_row_with(const uint16_t* v, int64_t width, Out* __restrict line,
                               Finish finish) {
  static_assert(std::endian::native == std::endian::little);
  using Pair [[gnu::may_alias]] = uint32_t;
  const Pair* __restrict pairs = reinterpret_cast<const Pair*>(v);
  const int64_t last = width / 2 - 1;
  line[0] = finish(v[-1] + 3 * (v[0] + v[1]) + v[2]);
  for (int64_t x = 1; x < last; ++x) {
    const uint32_t left = pairs[x - 1] >> 16, middle = (pairs[x] & 0xffff) + (pairs[x] >> 16),
                   right = pairs[x + 1] & 0xffff;
    line[x] = finish(left + 3 * middle + right);
  }
  line[last] = finish(v[2 * last - 1] + 3 * (v[2 * last] + v[2 * last + 1]) + v[2 * last + 2]);
}

// halve_row_with's levels, rounded half up.
WAM_INLINE void halve_row(const uint16_t* v, int64_t width, uint8_t* __restrict line) {
  halve_row_with(v, width, line,
                 [](uint32_t sum) { return static_cast<uint8_t>((sum + 32) >> 6); });
}

// Row y's four source rows (2y - 1 to 2y + 2, the edge rows repeated), `row` bytes apart.
struct SourceRows {
  const uint8_t *above, *top, *bottom, *below;
};
WAM_INLINE SourceRows source_rows(const uint8_t* source, int64_t row, int64_t height, int64_t y) {
  return {source + std::max<int64_t>(2 * y - 1, 0) * row, source + 2 * y * row,
          source + (2 * y + 1) * row, source + std::min(2 * y + 2, height - 1) * row};
}

// One row of the (1, 6, 1) / 8 filter's sums (at most 64 * 255) over a chroma plane's rows
// `above`, `middle`, `below` and then along the row, the edges repeated: `scratch` holds count + 2.
WAM_INLINE void chroma_sums(const uint8_t* __restrict above, const uint8_t* __restrict middle,
                            const uint8_t* __restrict below, int64_t count,
                            uint16_t* __restrict scratch, uint16_t* __restrict sums) {
  uint16_t* __restrict v = scratch + 1;
  for (int64_t x = 0; x < count; ++x) {
    v[x] = static_cast<uint16_t>(above[x] + 6 * middle[x] + below[x]);
  }
  v[-1] = v[0];
  v[count] = v[count - 1];
  for (int64_t x = 0; x < count; ++x) {
    sums[x] = static_cast<uint16_t>(v[x - 1] + 6 * v[x] + v[x + 1]);
  }
}

// halve_row_with's sums themselves.
WAM_INLINE void halve_row_sums(const uint16_t* v, int64_t width, uint16_t* __restrict sums) {
  halve_row_with(v, width, sums, [](uint32_t sum) { return static_cast<uint16_t>(sum); });
}

// Source row `source` interpolated along the columns' taps into `out` (`count` values), through
// its levels as floats in `levels`: gathering floats vectorises, gathering bytes does not.
WAM_INLINE void interpolate_row(const uint8_t* __restrict source, int64_t source_width,
                                const AxisTaps& columns, int64_t count, float* __restrict levels,
                                float* __restrict out) {
  for (int64_t x = 0; x < source_width; ++x) levels[x] = static_cast<float>(source[x]);
  const int32_t* __restrict first = columns.first;
  const int32_t* __restrict second = columns.second;
  const float* __restrict weight = columns.weight;
  for (int64_t j = 0; j < count; ++j) {
    const float a = levels[first[j]];
    out[j] = a + weight[j] * (levels[second[j]] - a);
  }
}

}  // namespace

WAM_PIXEL_KERNEL
void deinterleave_rgb(const uint8_t* packed, int64_t height, int64_t width, uint8_t* red,
                      uint8_t* green, uint8_t* blue, int64_t plane_stride) {
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* __restrict in = packed + y * width * 3;
    uint8_t* __restrict r = red + y * plane_stride;
    uint8_t* __restrict g = green + y * plane_stride;
    uint8_t* __restrict b = blue + y * plane_stride;
    for (int64_t x = 0; x < width; ++x) {
      r[x] = in[3 * x];
      g[x] = in[3 * x + 1];
      b[x] = in[3 * x + 2];
    }
  }
}

WAM_PIXEL_KERNEL
void halve_plane(const uint8_t* source, int64_t source_row, int64_t height, int64_t width,
                 uint8_t* out, int64_t out_row) {
  // 4-byte aligned, for halve_row's pairs; v[-1] and v[width] are the repeated edges.
  std::vector<uint16_t> sums(static_cast<size_t>(width + 4));
  uint16_t* v = sums.data() + 2;
  for (int64_t y = 0; y < height / 2; ++y) {
    const SourceRows rows = source_rows(source, source_row, height, y);
    vertical_sums(rows.above, rows.top, rows.bottom, rows.below, width, v);
    v[-1] = v[0];
    v[width] = v[width - 1];
    halve_row(v, width, out + y * out_row);
  }
}

WAM_PIXEL_KERNEL
void halve_rgb(const uint8_t* packed, int64_t height, int64_t width, uint8_t* red, uint8_t* green,
               uint8_t* blue, int64_t out_row) {
  // The vertical pass on the packed rows (contiguous), then its sums split into planes in the
  // cache: the frame is read from memory once, where deinterleaving it first wrote and read it
  // again whole.
  const int64_t row = 3 * width, plane_sums = width + 4;
  std::vector<uint16_t> packed_sums(static_cast<size_t>(row));
  std::vector<uint16_t> sums(static_cast<size_t>(3 * plane_sums));
  uint8_t* const out[3] = {red, green, blue};
  for (int64_t y = 0; y < height / 2; ++y) {
    const SourceRows rows = source_rows(packed, row, height, y);
    vertical_sums(rows.above, rows.top, rows.bottom, rows.below, row, packed_sums.data());
    for (int c = 0; c < 3; ++c) {
      uint16_t* __restrict v = sums.data() + c * plane_sums + 2;
      const uint16_t* __restrict in = packed_sums.data() + c;
      for (int64_t x = 0; x < width; ++x) v[x] = in[3 * x];
      v[-1] = v[0];
      v[width] = v[width - 1];
      halve_row(v, width, out[c] + y * out_row);
    }
  }
}

Yuv64Matrix::Yuv64Matrix(bool full_range) {
  // The sums are 64 times the levels; the matrix works on them in integers (exact, so they
  // vectorise in any order), with 2^14 for 1 and the rounding's half folded into the offsets.
  // Limited range stretches luma 16-235 and chroma 16-240 to 0-255 first.
  const double luma_scale = full_range ? 1.0 : 255.0 / 219.0;
  const double chroma_scale = full_range ? 1.0 : 255.0 / 224.0;
  const auto fixed = [](double x) { return static_cast<int32_t>(std::lround(x * (1 << 14))); };
  y_gain = fixed(luma_scale);
  v_to_red = fixed(1.402 * chroma_scale);
  u_to_green = fixed(0.344136 * chroma_scale);
  v_to_green = fixed(0.714136 * chroma_scale);
  u_to_blue = fixed(1.772 * chroma_scale);
  luma_black = full_range ? 0 : 16 * 64;
  // libswscale's integer conversion lands below the exact values (video_reader.cc, nv12_to_rgb).
  const double red_blue_offset = full_range ? 0.5 : 1.0, green_offset = full_range ? 1.0 : 1.5;
  const auto offset = [](double levels) {
    return static_cast<int32_t>(std::lround((0.5 - levels) * (1 << 20)));
  };
  red_blue_add = offset(red_blue_offset);
  green_add = offset(green_offset);
}

WAM_PIXEL_KERNEL
void rgb_from_yuv64(const Yuv64Matrix& matrix, const uint16_t* __restrict y_sums,
                    const uint16_t* __restrict u_sums, const uint16_t* __restrict v_sums,
                    int64_t count, uint8_t* __restrict red, uint8_t* __restrict green,
                    uint8_t* __restrict blue) {
  constexpr int32_t kChromaZero = 128 * 64;
  const Yuv64Matrix k = matrix;  // in registers: the stores below cannot alias it
  for (int64_t x = 0; x < count; ++x) {
    const int32_t luma_term = (static_cast<int32_t>(y_sums[x]) - k.luma_black) * k.y_gain;
    const int32_t u = static_cast<int32_t>(u_sums[x]) - kChromaZero;
    const int32_t v = static_cast<int32_t>(v_sums[x]) - kChromaZero;
    red[x] = static_cast<uint8_t>(
        std::clamp((luma_term + k.v_to_red * v + k.red_blue_add) >> 20, 0, 255));
    green[x] = static_cast<uint8_t>(
        std::clamp((luma_term - k.u_to_green * u - k.v_to_green * v + k.green_add) >> 20, 0, 255));
    blue[x] = static_cast<uint8_t>(
        std::clamp((luma_term + k.u_to_blue * u + k.red_blue_add) >> 20, 0, 255));
  }
}

WAM_PIXEL_KERNEL
void halve_yuv420(const uint8_t* luma, int64_t luma_row, const uint8_t* cb, const uint8_t* cr,
                  int64_t chroma_row, int64_t height, int64_t width, bool full_range, uint8_t* red,
                  uint8_t* green, uint8_t* blue, int64_t out_row) {
  const int64_t out_width = width / 2;
  const Yuv64Matrix matrix(full_range);
  std::vector<uint16_t> buffer(
      static_cast<size_t>(width + 4 + 2 * (out_width + 2) + 3 * out_width));
  uint16_t* const luma_columns = buffer.data() + 2;  // v[-1] and v[width]: the repeated edges
  uint16_t* const cb_scratch = buffer.data() + width + 4;
  uint16_t* const cr_scratch = cb_scratch + out_width + 2;
  uint16_t* const y_sums = cr_scratch + out_width + 2;
  uint16_t* const u_sums = y_sums + out_width;
  uint16_t* const v_sums = u_sums + out_width;
  const int64_t out_height = height / 2;
  for (int64_t y = 0; y < out_height; ++y) {
    const SourceRows rows = source_rows(luma, luma_row, height, y);
    vertical_sums(rows.above, rows.top, rows.bottom, rows.below, width, luma_columns);
    luma_columns[-1] = luma_columns[0];
    luma_columns[width] = luma_columns[width - 1];
    halve_row_sums(luma_columns, width, y_sums);
    const int64_t above = std::max<int64_t>(y - 1, 0) * chroma_row, middle = y * chroma_row,
                  below = std::min(y + 1, out_height - 1) * chroma_row;
    chroma_sums(cb + above, cb + middle, cb + below, out_width, cb_scratch, u_sums);
    chroma_sums(cr + above, cr + middle, cr + below, out_width, cr_scratch, v_sums);
    rgb_from_yuv64(matrix, y_sums, u_sums, v_sums, out_width, red + y * out_row,
                   green + y * out_row, blue + y * out_row);
  }
}

WAM_PIXEL_KERNEL
void sample_separable(const uint8_t* source, int64_t source_row, int64_t source_width,
                      const AxisTaps& columns, const AxisTaps& rows, int64_t out_height,
                      int64_t out_width, uint8_t* out, int64_t out_row) {
  // The two source rows last interpolated: consecutive output rows mostly share one.
  std::vector<float> buffer(static_cast<size_t>(source_width + 2 * out_width));
  float* const levels = buffer.data();
  float* interpolated[2] = {levels + source_width, levels + source_width + out_width};
  int64_t held[2] = {-1, -1};
  // The row `source_y`, interpolated unless held, replacing the other than `keep`.
  const auto row_of = [&](int64_t source_y, int64_t keep) -> const float* {
    for (int k = 0; k < 2; ++k) {
      if (held[k] == source_y) return interpolated[k];
    }
    const int k = held[0] == keep ? 1 : 0;
    interpolate_row(source + source_y * source_row, source_width, columns, out_width, levels,
                    interpolated[k]);
    held[k] = source_y;
    return interpolated[k];
  };
  for (int64_t i = 0; i < out_height; ++i) {
    const float* __restrict top = row_of(rows.first[i], rows.second[i]);
    const float* __restrict bottom = row_of(rows.second[i], rows.first[i]);
    const float weight = rows.weight[i];
    uint8_t* __restrict line = out + i * out_row;
    for (int64_t j = 0; j < out_width; ++j) {
      line[j] = static_cast<uint8_t>(top[j] + weight * (bottom[j] - top[j]) + 0.5f);
    }
  }
}

WAM_PIXEL_KERNEL
void warp_taps(const float theta[6], int64_t height, int64_t width, int64_t row,
               const PixelTaps& taps) {
  const float fw = static_cast<float>(width), fh = static_cast<float>(height);
  const float t0 = theta[0], t1 = theta[1], t2 = theta[2], t3 = theta[3], t4 = theta[4],
              t5 = theta[5];
  int32_t* __restrict offset = taps.offset;
  float* __restrict fx = taps.fx;
  float* __restrict fy = taps.fy;
  for (int64_t i = 0; i < height; ++i) {
    const float yn = static_cast<float>(2 * i + 1) / fh - 1.0f;
    for (int64_t j = 0; j < width; ++j) {
      const float xn = static_cast<float>(2 * j + 1) / fw - 1.0f;
      // grid_sample's source position, clamped to the plane (border padding).
      const float x =
          std::clamp(((t0 * xn + t1 * yn + t2 + 1.0f) * fw - 1.0f) / 2.0f, 0.0f, fw - 1.0f);
      const float y =
          std::clamp(((t3 * xn + t4 * yn + t5 + 1.0f) * fh - 1.0f) / 2.0f, 0.0f, fh - 1.0f);
      const auto x0 = static_cast<int32_t>(x), y0 = static_cast<int32_t>(y);
      const int64_t k = i * width + j;
      offset[k] = static_cast<int32_t>(y0 * row + x0);
      fx[k] = x - static_cast<float>(x0);  // 0 on the last column (x clamped to width - 1)
      fy[k] = y - static_cast<float>(y0);
    }
  }
}

namespace {

// One output pixel of sample_bilinear, taps index k, from the float plane `l` (rows `row` apart).
// On the last column or row the weight toward the next is 0: that level times 0 adds a zero, the
// bits of the edge's own level (PixelTaps).
WAM_INLINE uint8_t bilinear_pixel(const float* __restrict l, int64_t row, const PixelTaps& taps,
                                  int64_t k) {
  const int64_t p = taps.offset[k], q = p + row;
  const float top = l[p] + taps.fx[k] * (l[p + 1] - l[p]);
  const float bottom = l[q] + taps.fx[k] * (l[q + 1] - l[q]);
  return static_cast<uint8_t>(top + taps.fy[k] * (bottom - top) + 0.5f);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// sample_bilinear's blending with AVX-512, 16 pixels at a time, in the same float operations as
// bilinear_pixel. Written by hand: a warp of at most a few degrees takes a block's 16 pixels from
// two or three source rows and 32 columns, so each row's 32 levels are loaded once and every
// pixel's pick comes from two-register permutes, where the vectoriser's four gathers a block were
// the kernel's cost. A block beyond that (steep rotations, strong zooms out) and a row's last
// width % 16 pixels go pixel by pixel. Rows are read 32 levels wide from their first pick on, up
// to the row past the plane: `levels` has bilinear_levels_size's padding.
// GCC 12 warns of its own intrinsics' undefined-vector temporaries (avx512fintrin.h) here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f"))) void bilinear_blocks(const float* levels, int64_t row,
                                                        const PixelTaps& taps, int64_t height,
                                                        int64_t width, uint8_t* out,
                                                        int64_t out_row) {
  const __m512i row_step = _mm512_set1_epi32(static_cast<int32_t>(row));
  const __m512i zero = _mm512_setzero_si512();
  const __m512 half = _mm512_set1_ps(0.5f);
  for (int64_t i = 0; i < height; ++i) {
    uint8_t* line = out + i * out_row;
    int64_t j = 0;
    for (; j + 16 <= width; j += 16) {
      const int64_t k = i * width + j;
      const __m512i offset = _mm512_loadu_si512(taps.offset + k);
      // Each pixel's row against the first pixel's (y0), from its offset: -1, 0 or +1 here.
      const int64_t y0 = taps.offset[k] / row;
      const __m512i from_y0 =
          _mm512_sub_epi32(offset, _mm512_set1_epi32(static_cast<int32_t>(y0 * row)));
      const __mmask16 above = _mm512_cmplt_epi32_mask(from_y0, zero);
      const __mmask16 below = _mm512_cmpge_epi32_mask(from_y0, row_step);
      const bool fits =
          (above == 0 || below == 0) &&
          _mm512_cmplt_epi32_mask(from_y0, _mm512_set1_epi32(-static_cast<int32_t>(row))) == 0 &&
          _mm512_cmpge_epi32_mask(from_y0, _mm512_add_epi32(row_step, row_step)) == 0;
      // Column of each pixel: the offset less its row's start.
      const __m512i column =
          _mm512_sub_epi32(_mm512_mask_add_epi32(from_y0, above, from_y0, row_step),
                           _mm512_maskz_mov_epi32(below, row_step));
      const int32_t first_column = _mm512_reduce_min_epi32(column);
      const int32_t last_column = _mm512_reduce_max_epi32(column) + 1;
      if (!fits || last_column - first_column > 31) {
        for (int64_t x = j; x < j + 16; ++x)
          line[x] = bilinear_pixel(levels, row, taps, i * width + x);
        continue;
      }
      // Source rows top_row, top_row + 1, top_row + 2 (0, 1, 2 below); a pixel's top row is 0 or 1
      // (`upper`), its bottom row the next.
      const int64_t top_row = y0 - (above != 0 ? 1 : 0);
      const __mmask16 upper = above != 0 ? static_cast<__mmask16>(~above) : below;
      const __mmask16 bottom_1 = static_cast<__mmask16>(~upper);
      const __mmask16 bottom_2 = upper;
      const __m512i pick = _mm512_sub_epi32(column, _mm512_set1_epi32(first_column));
      const __m512i pick_right = _mm512_add_epi32(pick, _mm512_set1_epi32(1));
      __m512 left_of[3], right_of[3];
      for (int r = 0; r < 3; ++r) {
        if (r == 2 && bottom_2 == 0) {
          left_of[r] = right_of[r] = _mm512_setzero_ps();
          continue;
        }
        const float* source = levels + (top_row + r) * row + first_column;
        const __m512 low = _mm512_loadu_ps(source), high = _mm512_loadu_ps(source + 16);
        left_of[r] = _mm512_permutex2var_ps(low, pick, high);
        right_of[r] = _mm512_permutex2var_ps(low, pick_right, high);
      }
      const __m512 top_left = _mm512_mask_blend_ps(upper, left_of[0], left_of[1]);
      const __m512 top_right = _mm512_mask_blend_ps(upper, right_of[0], right_of[1]);
      const __m512 bottom_left = _mm512_mask_blend_ps(
          bottom_2, _mm512_mask_blend_ps(bottom_1, left_of[0], left_of[1]), left_of[2]);
      const __m512 bottom_right = _mm512_mask_blend_ps(
          bottom_2, _mm512_mask_blend_ps(bottom_1, right_of[0], right_of[1]), right_of[2]);
      const __m512 fx = _mm512_loadu_ps(taps.fx + k), fy = _mm512_loadu_ps(taps.fy + k);
      const __m512 top =
          _mm512_add_ps(top_left, _mm512_mul_ps(fx, _mm512_sub_ps(top_right, top_left)));
      const __m512 bottom =
          _mm512_add_ps(bottom_left, _mm512_mul_ps(fx, _mm512_sub_ps(bottom_right, bottom_left)));
      const __m512 level =
          _mm512_add_ps(_mm512_add_ps(top, _mm512_mul_ps(fy, _mm512_sub_ps(bottom, top))), half);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(line + j),
                       _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(level)));
    }
    for (; j < width; ++j) line[j] = bilinear_pixel(levels, row, taps, i * width + j);
  }
}
#pragma GCC diagnostic pop
#endif

}  // namespace

WAM_PIXEL_KERNEL
void sample_bilinear(const uint8_t* source, int64_t source_row, const PixelTaps& taps,
                     int64_t height, int64_t width, float* levels, uint8_t* out, int64_t out_row) {
  // The plane as floats, in the source's layout (the taps' offsets index it as they index the
  // bytes): picking floats vectorises, picking bytes does not.
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* __restrict in = source + y * source_row;
    float* __restrict row = levels + y * source_row;
    for (int64_t x = 0; x < width; ++x) row[x] = static_cast<float>(in[x]);
  }
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (__builtin_cpu_supports("avx512f")) {
    bilinear_blocks(levels, source_row, taps, height, width, out, out_row);
    return;
  }
#endif
  for (int64_t i = 0; i < height; ++i) {
    uint8_t* __restrict line = out + i * out_row;
    for (int64_t j = 0; j < width; ++j)
      line[j] = bilinear_pixel(levels, source_row, taps, i * width + j);
  }
}

WAM_PIXEL_KERNEL
void jitter_image(const uint8_t* source, int64_t source_plane, int64_t source_row, int64_t height,
                  int64_t width, const ColourJitter& j, float* out) {
  jitter(source, source_plane, source_row, height, width, j,
         [&](int c, int64_t y, const float* row) {
           std::copy(row, row + width, out + (c * height + y) * width);
         });
}

WAM_PIXEL_KERNEL
void jitter_image_levels(const uint8_t* source, int64_t source_plane, int64_t source_row,
                         int64_t height, int64_t width, const ColourJitter& j, uint8_t* out) {
  jitter(source, source_plane, source_row, height, width, j,
         [&](int c, int64_t y, const float* row) {
           uint8_t* __restrict line = out + (c * height + y) * width;
           for (int64_t x = 0; x < width; ++x) {
             // Round half to even by the float's own rounding, as torch's round_.
             const float level = (row[x] * 255.0f + 12582912.0f) - 12582912.0f;
             line[x] = static_cast<uint8_t>(std::min(std::max(level, 0.0f), 255.0f));
           }
         });
}

WAM_PIXEL_KERNEL
void jitter_image_signed(const uint8_t* source, int64_t source_plane, int64_t source_row,
                         int64_t height, int64_t width, const ColourJitter& j,
                         float* const planes[3]) {
  jitter(source, source_plane, source_row, height, width, j,
         [&](int c, int64_t y, const float* row) {
           float* __restrict line = planes[c] + y * width;
           for (int64_t x = 0; x < width; ++x) line[x] = row[x] * 2.0f - 1.0f;  // unit_to_signed's
         });
}

WAM_PIXEL_KERNEL
void jitter_image_video_levels(const uint8_t* source, int64_t source_plane, int64_t source_row,
                               int64_t height, int64_t width, const ColourJitter& j,
                               uint8_t* const planes[3]) {
  jitter(source, source_plane, source_row, height, width, j,
         [&](int c, int64_t y, const float* row) {
           uint8_t* __restrict line = planes[c] + y * width;
           for (int64_t x = 0; x < width; ++x) line[x] = unit_level(row[x]);
         });
}

WAM_PIXEL_KERNEL
void unit_to_signed(const float* unit, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = unit[i] * 2.0f - 1.0f;
}

WAM_PIXEL_KERNEL
void unit_to_levels(const float* unit, int64_t count, uint8_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = unit_level(unit[i]);
}

}  // namespace wam::pixel_kernels
