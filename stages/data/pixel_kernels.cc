#include "data/pixel_kernels.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

// Each entry point is built for x86-64's baseline (SSE2), AVX2 and AVX-512, and the loader picks
// one per machine (AVX-512 halves the time of the gamma's log and exp against AVX2). None uses FMA
// and no loop reorders a sum, so all give the same bits (as an -O0 build did, checked once): a
// sample renders identically on every machine of a job.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WAM_PIXEL_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WAM_PIXEL_KERNEL
#endif
#define WAM_INLINE [[gnu::always_inline]] inline

namespace wam::pixel_kernels {
namespace {

WAM_INLINE float clamp_unit(float x) { return std::min(std::max(x, 0.0f), 1.0f); }

// Natural log for x in (0, 1] (Cephes' logf: about 1 ulp), branch-free so that it vectorises;
// torch's Sleef log is as close. x <= 0 is the caller's case.
WAM_INLINE float log_unit(float x) {
  const int32_t bits = std::bit_cast<int32_t>(x);
  float e = static_cast<float>(((bits >> 23) & 0xff) - 126);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  // Both sides computed, one selected: a select vectorises, a branch does not.
  const bool low = m < 0.707106781186547524f;
  const float e_low = e - 1.0f, m_low = m + m - 1.0f, m_high = m - 1.0f;
  e = low ? e_low : e;
  m = low ? m_low : m_high;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  return m + y + 0.693359375f * e;
}

// e^x for x in [-87, 88] (Cephes' expf: about 1 ulp), branch-free.
WAM_INLINE float exp_clamped(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // Round to nearest by the float's own rounding: 1.5 * 2^23 pushes the fraction out.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  x -= n * 0.693359375f;
  x -= n * -2.12194440e-4f;
  const float z = x * x;
  float y = 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * z + x + 1.0f;
  return y * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// x^gamma for x in [0, 1]: 0 stays 0 (as exp(gamma * log 0) = exp(-inf) does).
WAM_INLINE float power_unit(float x, float gamma) {
  const float y = exp_clamped(gamma * log_unit(std::max(x, 1e-30f)));
  return x > 0.0f ? clamp_unit(y) : 0.0f;
}

WAM_INLINE float grey(float r, float g, float b) { return r * 0.299f + g * 0.587f + b * 0.114f; }

// Row `y` of the image as [0, 1] floats with brightness applied.
WAM_INLINE void load_row(const uint8_t* source, int64_t source_plane, int64_t source_row, int64_t y,
                         int64_t width, float brightness, float* rows[3]) {
  for (int c = 0; c < 3; ++c) {
    const uint8_t* in = source + c * source_plane + y * source_row;
    float* row = rows[c];
    for (int64_t x = 0; x < width; ++x) row[x] = static_cast<float>(in[x]) / 255.0f;
    if (brightness != 1.0f) {
      for (int64_t x = 0; x < width; ++x) row[x] = clamp_unit(row[x] * brightness);
    }
  }
}

// The steps after brightness, in place on one row; `mean_grey` is the contrast's blend target.
WAM_INLINE void jitter_row(const ColourJitter& j, float mean_grey, const float* attenuation,
                           int64_t width, float* rows[3]) {
  float* __restrict r = rows[0];
  float* __restrict g = rows[1];
  float* __restrict b = rows[2];
  if (j.contrast != 1.0f) {
    const float keep = j.contrast, add = (1.0f - j.contrast) * mean_grey;
    for (int64_t x = 0; x < width; ++x) {
      r[x] = clamp_unit(r[x] * keep + add);
      g[x] = clamp_unit(g[x] * keep + add);
      b[x] = clamp_unit(b[x] * keep + add);
    }
  }
  if (j.saturation != 1.0f) {
    const float keep = j.saturation, blend = 1.0f - j.saturation;
    for (int64_t x = 0; x < width; ++x) {
      const float level = grey(r[x], g[x], b[x]) * blend;
      r[x] = clamp_unit(r[x] * keep + level);
      g[x] = clamp_unit(g[x] * keep + level);
      b[x] = clamp_unit(b[x] * keep + level);
    }
  }
  if (j.gamma != 1.0f) {
    const float gamma = j.gamma;
    for (int64_t x = 0; x < width; ++x) r[x] = power_unit(r[x], gamma);
    for (int64_t x = 0; x < width; ++x) g[x] = power_unit(g[x], gamma);
    for (int64_t x = 0; x < width; ++x) b[x] = power_unit(b[x], gamma);
  }
  for (int c = 0; c < 3; ++c) {
    float* __restrict row = rows[c];
    const float gain = j.gain[c];
    if (gain != 1.0f) {
      for (int64_t x = 0; x < width; ++x) row[x] = clamp_unit(row[x] * gain);
    }
    if (attenuation) {
      for (int64_t x = 0; x < width; ++x) row[x] *= attenuation[x];
    }
  }
}

// The contrast's blend target: the mean grey of the brightness-adjusted image. Rows are summed in
// float and added up in double, a sum of the same accuracy as torch's mean.
WAM_INLINE float mean_grey(const uint8_t* source, int64_t source_plane, int64_t source_row,
                           int64_t height, int64_t width, float brightness, float* rows[3]) {
  double total = 0.0;
  for (int64_t y = 0; y < height; ++y) {
    load_row(source, source_plane, source_row, y, width, brightness, rows);
    float sum = 0.0f;
    for (int64_t x = 0; x < width; ++x) sum += grey(rows[0][x], rows[1][x], rows[2][x]);
    total += sum;
  }
  return static_cast<float>(total / static_cast<double>(height * width));
}

template <class Store>
WAM_INLINE void jitter(const uint8_t* source, int64_t source_plane, int64_t source_row,
                       int64_t height, int64_t width, const ColourJitter& j, Store store) {
  std::vector<float> buffer(static_cast<size_t>(3 * width));
  float* rows[3] = {buffer.data(), buffer.data() + width, buffer.data() + 2 * width};
  const float mean = j.contrast != 1.0f ? mean_grey(source, source_plane, source_row, height, width,
                                                    j.brightness, rows)
                                        : 0.0f;
  for (int64_t y = 0; y < height; ++y) {
    load_row(source, source_plane, source_row, y, width, j.brightness, rows);
    jitter_row(j, mean, j.attenuation ? j.attenuation + y * width : nullptr, width, rows);
    for (int c = 0; c < 3; ++c) store(c, y, rows[c]);
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

}  // namespace wam::pixel_kernels
