// Seed derivation shared by every stage and tool that draws random numbers: values depend on the
// seeds given, never on threads or arrival order. Tests pin values drawn from these: changing a
// constant changes every dataset, augmentation and noise draw.
#pragma once

#include <cstdint>

namespace wam::seeding {

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mix.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed for the stream `b` of seed `a` (an episode, an epoch, a sample id).
constexpr uint64_t mix_seed(uint64_t a, uint64_t b) { return splitmix64(a ^ splitmix64(b)); }

}  // namespace wam::seeding
