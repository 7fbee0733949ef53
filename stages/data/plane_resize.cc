#include "data/plane_resize.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "data/pixel_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define WAM_PLANE_RESIZE_KERNEL 1
#define WAM_VBMI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi")))
#endif

namespace wam::plane_resize {
namespace {

int floor_log2(int value) {
  int log = 0;
  while (value > 1) {
    value >>= 1;
    ++log;
  }
  return log;
}

// C's rounded division of libswscale's normalisation: halves away from zero.
int64_t rounded_div(int64_t a, int64_t b) { return (a >= 0 ? a + b / 2 : a - b / 2) / b; }

}  // namespace

// libswscale's bilinear filter construction, step by step (its "initFilter" for SWS_BILINEAR
// with luma positions and SWS_BITEXACT): taps from a 16.16 step with the source centre of each
// output in 1/2^17 pixels, the triangle widened by the scale when shrinking, weights in 2^54
// fixed point; near-zero taps trimmed from both ends (up to 0.2% of the weight); taps outside the
// source folded onto its edge pixels; then each output's weights normalised to `one` with the
// rounding error carried from tap to tap.
AxisFilter bilinear_filter(int source_size, int target_size, int one, int align) {
  const int64_t step = ((static_cast<int64_t>(source_size) << 16) + target_size / 2) / target_size;
  const int64_t unit = int64_t{1} << (54 - std::min(floor_log2(source_size / target_size), 8));
  const bool shrinking = step > (1 << 16);
  int taps = shrinking ? 1 + (2 * source_size + target_size - 1) / target_size : 3;
  taps = std::max(std::min(taps, source_size - 2), 1);

  std::vector<int64_t> wide(static_cast<size_t>(target_size) * taps);
  std::vector<int32_t> first(static_cast<size_t>(target_size));
  int64_t centre = step - (1 << 16);
  for (int i = 0; i < target_size; ++i, centre += 2 * step) {
    int64_t x = (centre - static_cast<int64_t>(taps - 2) * (1 << 16)) / (1 << 17);
    first[i] = static_cast<int32_t>(x);
    for (int j = 0; j < taps; ++j, ++x) {
      int64_t distance = std::abs(x * (1 << 17) - centre) << 13;
      if (shrinking) distance = distance * target_size / source_size;
      wide[static_cast<size_t>(i) * taps + j] =
          std::max<int64_t>((int64_t{1} << 30) - distance, 0) * (unit >> 30);
    }
  }

  const double cut_off = 0.002 * static_cast<double>(unit);
  int kept_taps = 0;
  for (int i = target_size - 1; i >= 0; --i) {
    int64_t* row = &wide[static_cast<size_t>(i) * taps];
    int64_t cut = 0;
    for (int j = 0; j < taps; ++j) {
      cut += std::abs(row[0]);
      if (static_cast<double>(cut) > cut_off) break;
      if (i < target_size - 1 && first[i] >= first[i + 1]) break;  // positions stay increasing
      std::copy(row + 1, row + taps, row);
      row[taps - 1] = 0;
      ++first[i];
    }
    int kept = taps;
    cut = 0;
    for (int j = taps - 1; j > 0; --j) {
      cut += std::abs(row[j]);
      if (static_cast<double>(cut) > cut_off) break;
      --kept;
    }
    kept_taps = std::max(kept_taps, kept);
  }
  if (kept_taps == 1 && align == 2) align = 1;

  AxisFilter filter;
  filter.taps = (kept_taps + align - 1) / align * align;
  filter.first = std::move(first);
  filter.weights.resize(static_cast<size_t>(target_size) * filter.taps);
  std::vector<int64_t> row(static_cast<size_t>(filter.taps));
  for (int i = 0; i < target_size; ++i) {
    for (int j = 0; j < filter.taps; ++j) {
      row[j] = j < kept_taps ? wide[static_cast<size_t>(i) * taps + j] : 0;
    }
    int32_t& start = filter.first[i];
    if (start < 0) {
      for (int j = 1; j < filter.taps; ++j) {
        row[std::max(j + start, 0)] += row[j];
        row[j] = 0;
      }
      start = 0;
    }
    if (start + filter.taps > source_size) {
      const int shift = start + std::min(filter.taps - source_size, 0);
      int64_t beyond = 0;
      for (int j = 0; j < filter.taps; ++j) {
        if (start + j >= source_size) {
          beyond += row[j];
          row[j] = 0;
        }
      }
      for (int j = filter.taps - 1; j >= 0; --j) row[j] = j < shift ? 0 : row[j - shift];
      start -= shift;
      row[source_size - 1 - start] += beyond;
    }
    int64_t sum = 0;
    for (int64_t weight : row) sum += weight;
    sum = std::max<int64_t>((sum + one / 2) / one, 1);
    int64_t error = 0;
    for (int j = 0; j < filter.taps; ++j) {
      const int64_t value = row[j] + error;
      const int64_t weight = rounded_div(value, sum);
      filter.weights[static_cast<size_t>(i) * filter.taps + j] = static_cast<int16_t>(weight);
      error = value - weight * sum;
    }
  }
  return filter;
}

AxisFilter over_pairs(const AxisFilter& filter, int source_size, int align) {
  const int half = source_size / 2;
  const size_t outputs = filter.first.size();
  int taps = 1;
  for (size_t i = 0; i < outputs; ++i)
    taps = std::max(taps, ((filter.first[i] & 1) + filter.taps + 1) / 2);
  taps = std::min((taps + align - 1) / align * align, half);
  AxisFilter pairs;
  pairs.taps = taps;
  pairs.first.resize(outputs);
  pairs.weights.assign(outputs * static_cast<size_t>(taps), 0);
  for (size_t i = 0; i < outputs; ++i) {
    const int start = std::max(std::min(filter.first[i] / 2, half - taps), 0);
    pairs.first[i] = start;
    for (int j = 0; j < filter.taps; ++j) {
      const int16_t weight = filter.weights[i * static_cast<size_t>(filter.taps) + j];
      if (weight == 0) continue;  // a padding tap may lie past the plane
      const int pair = (filter.first[i] + j) / 2;
      pairs.weights[i * static_cast<size_t>(taps) + static_cast<size_t>(pair - start)] += weight;
    }
  }
  return pairs;
}

template <typename Out>
void resize_plainly(const uint8_t* source, int64_t source_row, const AxisFilter& horizontal,
                    const AxisFilter& vertical, int shift, Out* target, int64_t target_row) {
  const auto width = static_cast<int64_t>(horizontal.first.size());
  const auto height = static_cast<int64_t>(vertical.first.size());
  const int row_begin = *std::min_element(vertical.first.begin(), vertical.first.end());
  const int row_end =
      *std::max_element(vertical.first.begin(), vertical.first.end()) + vertical.taps;
  std::vector<int32_t> sums(static_cast<size_t>((row_end - row_begin) * width));
  for (int y = row_begin; y < row_end; ++y) {
    const uint8_t* row = source + y * source_row;
    int32_t* out = sums.data() + (y - row_begin) * width;
    for (int64_t x = 0; x < width; ++x) {
      const int16_t* w = &horizontal.weights[static_cast<size_t>(x * horizontal.taps)];
      int32_t sum = 0;
      for (int j = 0; j < horizontal.taps; ++j) {
        if (w[j] != 0) sum += w[j] * row[horizontal.first[static_cast<size_t>(x)] + j];
      }
      out[x] = sum >> 7;
    }
  }
  // The kernel packs to int16 with saturation, then bytes to 0..255.
  const int32_t low = std::is_same_v<Out, uint8_t> ? 0 : std::numeric_limits<int16_t>::min();
  const int32_t high = std::is_same_v<Out, uint8_t> ? 255 : std::numeric_limits<int16_t>::max();
  for (int64_t i = 0; i < height; ++i) {
    const int16_t* w = &vertical.weights[static_cast<size_t>(i * vertical.taps)];
    const int32_t* rows =
        sums.data() + (vertical.first[static_cast<size_t>(i)] - row_begin) * width;
    Out* out = target + i * target_row;
    for (int64_t x = 0; x < width; ++x) {
      int32_t sum = int32_t{1} << (shift - 1);
      for (int k = 0; k < vertical.taps; ++k) sum += w[k] * rows[k * width + x];
      out[x] = static_cast<Out>(std::clamp(sum >> shift, low, high));
    }
  }
}
template void resize_plainly(const uint8_t*, int64_t, const AxisFilter&, const AxisFilter&, int,
                             uint8_t*, int64_t);
template void resize_plainly(const uint8_t*, int64_t, const AxisFilter&, const AxisFilter&, int,
                             uint16_t*, int64_t);

#ifdef WAM_PLANE_RESIZE_KERNEL
// GCC 12's AVX-512 intrinsics start their results from _mm512_undefined_epi32(), which its own
// -Wmaybe-uninitialized then reports as used uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace {

// The horizontal pass makes 32 outputs at a time, as two vectors a and b of 16 32-bit sums, each
// sum two taps' byte x weight products (vpmaddwd) added up. packs_epi32(a, b) interleaves them by
// 128-bit lane, four words of a then four of b: so a's lane 4L + m computes output 8L + m and b's
// lane 4L + m output 8L + 4 + m, and the packed words come out in order.
int block_output(int vector, int lane) { return 8 * (lane / 4) + 4 * vector + lane % 4; }

constexpr int kWindow = 128;  // source bytes a block may read: two 64-byte loads

WAM_VBMI inline __mmask64 first_bytes(int64_t count) {
  return count >= 64 ? ~__mmask64{0} : count <= 0 ? 0 : (__mmask64{1} << count) - 1;
}

// Every source row in [row_begin, row_end): libswscale's horizontal scaler's 15-bit sums, the
// weighted bytes >> 7 (at most 255 << 7, so packs' saturation never clips).
template <int Pairs>
WAM_VBMI void horizontal_sums(const uint8_t* source, int64_t source_row, int source_width,
                              int row_begin, int row_end, int blocks, const int32_t* block_start,
                              const uint8_t* indices, const int16_t* weights, int16_t* sums,
                              int64_t sums_row) {
  // Within each 32-bit lane only the even bytes are wanted (zero-extended to words by the mask).
  constexpr __mmask64 kLowBytes = 0x5555555555555555ull;
  for (int y = row_begin; y < row_end; ++y) {
    const uint8_t* row = source + y * source_row;
    int16_t* out = sums + y * sums_row;
    for (int block = 0; block < blocks; ++block) {
      const int start = block_start[block];
      const int64_t left = source_width - start;
      const __m512i low = _mm512_maskz_loadu_epi8(first_bytes(left), row + start);
      const __m512i high = _mm512_maskz_loadu_epi8(first_bytes(left - 64), row + start + 64);
      __m512i vectors[2];
      for (int v = 0; v < 2; ++v) {
        __m512i sum = _mm512_setzero_si512();
        for (int pair = 0; pair < Pairs; ++pair) {
          const int64_t table = (static_cast<int64_t>(block) * 2 + v) * Pairs + pair;
          const __m512i taps = _mm512_maskz_permutex2var_epi8(
              kLowBytes, low, _mm512_loadu_si512(indices + table * 64), high);
          sum = _mm512_add_epi32(sum,
                                 _mm512_madd_epi16(taps, _mm512_loadu_si512(weights + table * 32)));
        }
        vectors[v] = _mm512_srai_epi32(sum, 7);
      }
      _mm512_storeu_si512(out + 32 * block, _mm512_packs_epi32(vectors[0], vectors[1]));
    }
  }
}

// libswscale's vertical scaler: (sum of the taps' sums x weights + 2^18) >> 19, clipped to a byte,
// or, for uint16 outputs, (... + 2^12) >> 13, 64 times the level. Two rows' words interleaved
// (unpack) meet two weights in one vpmaddwd; unpack and pack both act per 128-bit lane, so the
// words come back in order and only the final bytes need a permute.
template <int Taps, typename Out>
WAM_VBMI void vertical_pass(const int16_t* sums, int64_t sums_row, const AxisFilter& filter,
                            int width, int height, Out* target, int64_t target_row) {
  constexpr bool kBytes = std::is_same_v<Out, uint8_t>;
  constexpr int kShift = kBytes ? 19 : 13;
  constexpr int kPairs = (Taps + 1) / 2;
  const __m512i round = _mm512_set1_epi32(1 << (kShift - 1));
  const __m512i in_order = _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7);
  for (int y = 0; y < height; ++y) {
    const int16_t* w = &filter.weights[static_cast<size_t>(y) * Taps];
    __m512i pair_weights[kPairs];
    for (int pair = 0; pair < kPairs; ++pair) {
      const int32_t second = 2 * pair + 1 < Taps ? w[2 * pair + 1] : 0;
      pair_weights[pair] =
          _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint16_t>(w[2 * pair])) |
                            static_cast<int32_t>(static_cast<uint32_t>(second) << 16));
    }
    const int16_t* rows = sums + filter.first[y] * sums_row;
    Out* out = target + y * target_row;
    for (int x = 0; x < width; x += 64) {
      __m512i words[2];
      for (int half = 0; half < 2; ++half) {
        __m512i low = round, high = round;
        for (int pair = 0; pair < kPairs; ++pair) {
          const int16_t* upper = rows + 2 * pair * sums_row + x + 32 * half;
          const int16_t* lower = 2 * pair + 1 < Taps ? upper + sums_row : upper;
          const __m512i a = _mm512_loadu_si512(upper), b = _mm512_loadu_si512(lower);
          low = _mm512_add_epi32(
              low, _mm512_madd_epi16(_mm512_unpacklo_epi16(a, b), pair_weights[pair]));
          high = _mm512_add_epi32(
              high, _mm512_madd_epi16(_mm512_unpackhi_epi16(a, b), pair_weights[pair]));
        }
        words[half] =
            _mm512_packs_epi32(_mm512_srai_epi32(low, kShift), _mm512_srai_epi32(high, kShift));
      }
      if constexpr (kBytes) {
        const __m512i bytes =
            _mm512_permutexvar_epi64(in_order, _mm512_packus_epi16(words[0], words[1]));
        _mm512_mask_storeu_epi8(out + x, first_bytes(width - x), bytes);
      } else {
        for (int half = 0; half < 2; ++half) {
          const int64_t left = width - x - 32 * half;
          if (left <= 0) break;
          const __mmask32 mask = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
          _mm512_mask_storeu_epi16(out + x + 32 * half, mask, words[half]);
        }
      }
    }
  }
}

}  // namespace

std::unique_ptr<PlaneResizer> PlaneResizer::make(int source_width, int source_height,
                                                 int target_width, int target_height) {
  if (source_width < 3 || source_height < 3 || target_width < 1 || target_height < 1)
    return nullptr;
  return make(source_width, source_height, bilinear_filter(source_width, target_width, 1 << 14, 4),
              bilinear_filter(source_height, target_height, 1 << 12, 2));
}

std::unique_ptr<PlaneResizer> PlaneResizer::make(int source_width, int source_height,
                                                 const AxisFilter& horizontal,
                                                 AxisFilter vertical) {
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512vbmi") || source_width < 3 || source_height < 3) {
    return nullptr;
  }
  const int target_width = static_cast<int>(horizontal.first.size());
  const int target_height = static_cast<int>(vertical.first.size());
  const bool vertical_taps_taken =
      vertical.taps == 1 || (vertical.taps % 2 == 0 && vertical.taps <= 8);
  if ((horizontal.taps != 4 && horizontal.taps != 8) || !vertical_taps_taken || target_width < 1 ||
      target_height < 1 || vertical.first.back() + vertical.taps > source_height) {
    return nullptr;
  }
  std::unique_ptr<PlaneResizer> resizer(new PlaneResizer());
  PlaneResizer& r = *resizer;
  r.source_width_ = source_width;
  r.target_width_ = target_width;
  r.target_height_ = target_height;
  r.horizontal_pairs_ = horizontal.taps / 2;
  r.blocks_ = (target_width + 31) / 32;
  r.block_start_.resize(static_cast<size_t>(r.blocks_));
  const size_t tables = static_cast<size_t>(r.blocks_) * 2 * r.horizontal_pairs_;
  r.indices_.assign(tables * 64, 0);  // a lane past the width: byte 0, weight 0
  r.weights_.assign(tables * 32, 0);
  for (int block = 0; block < r.blocks_; ++block) {
    const int start = horizontal.first[static_cast<size_t>(32 * block)];
    r.block_start_[static_cast<size_t>(block)] = start;
    for (int v = 0; v < 2; ++v) {
      for (int lane = 0; lane < 16; ++lane) {
        const int i = 32 * block + block_output(v, lane);
        if (i >= target_width) continue;
        if (horizontal.first[static_cast<size_t>(i)] + horizontal.taps - start > kWindow) {
          return nullptr;
        }
        for (int tap = 0; tap < horizontal.taps; ++tap) {
          const size_t table = (static_cast<size_t>(block) * 2 + v) * r.horizontal_pairs_ + tap / 2;
          r.indices_[table * 64 + 4 * lane + 2 * (tap % 2)] =
              static_cast<uint8_t>(horizontal.first[static_cast<size_t>(i)] + tap - start);
          r.weights_[table * 32 + 2 * lane + tap % 2] =
              horizontal.weights[static_cast<size_t>(i) * horizontal.taps + tap];
        }
      }
    }
  }
  r.vertical_ = std::move(vertical);
  // Whole 64-word rows: the vertical pass reads 64 at a time (past the width: zeros, not stored).
  r.sums_row_ = (target_width + 63) / 64 * 64;
  r.sums_.assign(static_cast<size_t>(source_height * r.sums_row_), 0);
  return resizer;
}

void PlaneResizer::horizontal_pass(const uint8_t* source, int64_t source_row) {
  const int row_begin = vertical_.first.front();
  const int row_end = vertical_.first.back() + vertical_.taps;
  // make() allows 4 or 8 horizontal taps.
  if (horizontal_pairs_ == 2) {
    horizontal_sums<2>(source, source_row, source_width_, row_begin, row_end, blocks_,
                       block_start_.data(), indices_.data(), weights_.data(), sums_.data(),
                       sums_row_);
  } else {
    horizontal_sums<4>(source, source_row, source_width_, row_begin, row_end, blocks_,
                       block_start_.data(), indices_.data(), weights_.data(), sums_.data(),
                       sums_row_);
  }
}

namespace {

// The vertical pass for make()'s vertical taps: 1, 2, 4, 6 or 8.
template <typename Out>
void vertical_for_taps(const int16_t* sums, int64_t sums_row, const AxisFilter& filter, int width,
                       int height, Out* target, int64_t target_row) {
  const auto pass = [&](auto taps) {
    vertical_pass<decltype(taps)::value>(sums, sums_row, filter, width, height, target, target_row);
  };
  switch (filter.taps) {
    case 1: pass(std::integral_constant<int, 1>{}); break;
    case 2: pass(std::integral_constant<int, 2>{}); break;
    case 4: pass(std::integral_constant<int, 4>{}); break;
    case 6: pass(std::integral_constant<int, 6>{}); break;
    default: pass(std::integral_constant<int, 8>{}); break;
  }
}

}  // namespace

void PlaneResizer::resize(const uint8_t* source, int64_t source_row, uint8_t* target,
                          int64_t target_row) {
  horizontal_pass(source, source_row);
  vertical_for_taps(sums_.data(), sums_row_, vertical_, target_width_, target_height_, target,
                    target_row);
}

void PlaneResizer::resize_levels64(const uint8_t* source, int64_t source_row, uint16_t* target,
                                   int64_t target_row) {
  horizontal_pass(source, source_row);
  vertical_for_taps(sums_.data(), sums_row_, vertical_, target_width_, target_height_, target,
                    target_row);
}

#else  // not x86-64 with GCC: libswscale resizes

std::unique_ptr<PlaneResizer> PlaneResizer::make(int, int, int, int) { return nullptr; }
std::unique_ptr<PlaneResizer> PlaneResizer::make(int, int, const AxisFilter&, AxisFilter) {
  return nullptr;
}
void PlaneResizer::horizontal_pass(const uint8_t*, int64_t) {}
void PlaneResizer::resize(const uint8_t*, int64_t, uint8_t*, int64_t) {}
void PlaneResizer::resize_levels64(const uint8_t*, int64_t, uint16_t*, int64_t) {}

#endif

std::unique_ptr<Yuv420Resizer> Yuv420Resizer::make(int width, int height, int target_width,
                                                   int target_height) {
  if (width % 2 != 0 || height % 2 != 0 || width < 8 || height < 8 || target_width < 1 ||
      target_height < 1) {
    return nullptr;
  }
  std::unique_ptr<Yuv420Resizer> resizer(new Yuv420Resizer());
  Yuv420Resizer& r = *resizer;
  r.target_width_ = target_width;
  r.target_height_ = target_height;
  r.horizontal_[0] = bilinear_filter(width, target_width, 1 << 14, 4);
  r.vertical_[0] = bilinear_filter(height, target_height, 1 << 12, 2);
  r.horizontal_[1] = over_pairs(r.horizontal_[0], width, 4);
  r.vertical_[1] = over_pairs(r.vertical_[0], height, 2);
  r.kernels_[0] = PlaneResizer::make(width, height, r.horizontal_[0], r.vertical_[0]);
  r.kernels_[1] = PlaneResizer::make(width / 2, height / 2, r.horizontal_[1], r.vertical_[1]);
  r.levels_.resize(static_cast<size_t>(3 * target_width * target_height));
  return resizer;
}

void Yuv420Resizer::resize_plane(int which, const uint8_t* source, int64_t source_row,
                                 uint16_t* target) {
  if (kernels_[which]) {
    kernels_[which]->resize_levels64(source, source_row, target, target_width_);
  } else {
    resize_plainly(source, source_row, horizontal_[which], vertical_[which], 13, target,
                   target_width_);
  }
}

void Yuv420Resizer::resize(const uint8_t* luma, int64_t luma_row, const uint8_t* cb,
                           const uint8_t* cr, int64_t chroma_row, bool full_range, uint8_t* red,
                           uint8_t* green, uint8_t* blue, int64_t out_row) {
  const int64_t plane = static_cast<int64_t>(target_width_) * target_height_;
  uint16_t* const y = levels_.data();
  uint16_t* const u = y + plane;
  uint16_t* const v = u + plane;
  resize_plane(0, luma, luma_row, y);
  resize_plane(1, cb, chroma_row, u);
  resize_plane(1, cr, chroma_row, v);
  const pixel_kernels::Yuv64Matrix matrix(full_range);
  for (int64_t row = 0; row < target_height_; ++row) {
    const int64_t at = row * target_width_;
    pixel_kernels::rgb_from_yuv64(matrix, y + at, u + at, v + at, target_width_,
                                  red + row * out_row, green + row * out_row, blue + row * out_row);
  }
}

}  // namespace wam::plane_resize
